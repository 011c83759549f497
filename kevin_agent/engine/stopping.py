"""When a run may end before its last turn: a kernel fast enough (``--target-speedup``), or one so
close to the device's roofline that little is left to win (``--stop-at-roofline``).

A turn that reaches either starts a confirmation; the run ends only when the confirmed winner meets
it and is not flagged (``Engine._check_target``), so one lucky measurement never ends a run.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..config import RunConfig
from ..formatting import fmt_fraction
from ..results import TurnRecord
from ..results.winner import Winner


def asked(config: RunConfig) -> bool:
    """Whether the run may end early at all."""
    return config.target_speedup is not None or config.stop_at_roofline is not None


def meets(config: RunConfig, speedup: float | None, fraction: float | None) -> bool:
    """A kernel with this speedup and share of its roofline is good enough to end the run."""
    target, roof = config.target_speedup, config.stop_at_roofline
    return ((target is not None and speedup is not None and speedup >= target)
            or (roof is not None and fraction is not None and fraction >= roof))


def reaching(config: RunConfig, records: Sequence[TurnRecord]) -> set[tuple[int, int]]:
    """The verified, unflagged turns whose own numbers meet what the run stops at."""
    return {(r.trajectory, r.turn) for r in records
            if r.correct and r.eval is not None and not r.eval.implausible
            and meets(config, r.speedup, r.eval.roofline.fraction if r.eval.roofline is not None else None)}


def _fraction(best: Winner) -> float | None:
    return best.roofline.fraction if best.roofline is not None else None


def ending(config: RunConfig, best: Winner | None) -> tuple[str, str] | None:
    """(reason, what to say) when the confirmed winner ends the run, else None. The speedup target
    is judged first: a run that asked for both and reached both ended on its target."""
    if best is None or best.confirmed is None or best.flag is not None:
        return None
    target, roof = config.target_speedup, config.stop_at_roofline
    where = f"t{best.trajectory} turn {best.turn}"
    if target is not None and best.speedup >= target:
        return "target_reached", f"{where} confirmed at {best.speedup:.2f}x, at or above --target-speedup {target:g}x"
    fraction = _fraction(best)
    if roof is not None and fraction is not None and fraction >= roof:
        bound = best.roofline.bound if best.roofline is not None else "memory"
        return ("roofline_reached",
                f"{where} confirmed at {fmt_fraction(fraction)} of its roofline ({bound}-bound), at or above "
                f"--stop-at-roofline {roof:g}: little is left to win on this device")
    return None


def not_ended(config: RunConfig, best: Winner | None) -> str:
    """Why a turn that met what the run stops at did not end it, once its kernel was confirmed."""
    target, roof = config.target_speedup, config.stop_at_roofline
    what = " and ".join(([f"--target-speedup {target:g}x"] if target is not None else [])
                        + ([f"--stop-at-roofline {roof:g}"] if roof is not None else []))
    if best is None:
        why = "no kernel survived it"
    elif best.flag is not None:
        why = f"the winner is flagged ({best.flag})"
    else:
        why = f"the winner confirmed at {best.speedup:.2f}x"
        if config.stop_at_roofline is not None and (fraction := _fraction(best)) is not None:
            why += f", {fmt_fraction(fraction)} of its roofline"
    return f"{what} was reached by a turn, but on a second look {why}; the run goes on"
