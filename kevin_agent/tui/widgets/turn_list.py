"""Trajectories and their turns, each with a status mark and the speedup."""

from __future__ import annotations

from textual.content import Content
from textual.widgets import OptionList
from textual.widgets.option_list import Option, OptionDoesNotExist

from ...formatting import fmt_speedup
from ...results import Confirmed, TurnRecord
from ..format import live_label, turn_label, widest_turn_label
from ..state import Key, LiveTurn, TurnKey

MIN_WIDTH = 24
"""The narrowest the list gets (its border title and the chart under it need this much)."""


def width_for(label_cells: int) -> int:
    """The list's width for labels of that many cells: with the option padding, border and scrollbar."""
    return max(MIN_WIDTH, label_cells + 2 + 2 + 1)


def option_id(key: Key) -> str:
    if len(key) == 3:
        return f"c{key[0]}-{key[1]}-{key[2]}"
    return f"t{key[0]}-{key[1]}"


def parse_option_id(option_id: str | None) -> Key | None:
    if not option_id or option_id[:1] not in ("t", "c") or "-" not in option_id:
        return None
    numbers = tuple(int(n) for n in option_id[1:].split("-"))
    return numbers if len(numbers) == (3 if option_id[0] == "c" else 2) else None  # type: ignore[return-value]


class TurnList(OptionList):
    """Rebuilt whole on each change (turns finish seconds apart), keeping the highlighted turn.

    Its width follows its labels, so that the panes beside it get the rest of the screen.
    """

    DEFAULT_CSS = """
    TurnList { height: 1fr; scrollbar-size-vertical: 1; }
    """

    def show(
        self,
        records: dict[TurnKey, TurnRecord],
        live: dict[int, LiveTurn] | None = None,
        trajectories: list[int] | None = None,
        cancelled: dict[TurnKey, list[TurnRecord]] | None = None,
        confirmed: dict[TurnKey, Confirmed] | None = None,
    ) -> None:
        live = live or {}
        confirmed = confirmed or {}
        cancelled = cancelled or {}
        trajs = trajectories or sorted({t for t, _ in records} | {t for t, _ in cancelled} | set(live))
        highlighted = self.highlighted_option.id if self.highlighted_option is not None else None
        options: list[Option] = []
        for traj in trajs:
            turns = sorted({k for k in records if k[0] == traj} | {k for k in cancelled if k[0] == traj})
            if len(trajs) > 1:
                speeds = [s for k in turns if k in records and (s := records[k].speedup) is not None]
                best = Content.styled(f" best {fmt_speedup(max(speeds))}", "$text-success") if speeds else ""
                options.append(Option(Content.assemble((f"trajectory {traj}", "bold"), best), id=f"traj-{traj}", disabled=True))
            lv = live.get(traj)
            for key in turns:
                # A cancelled generation is listed where it happened: before the turn's next attempt.
                for n, rec in enumerate(cancelled.get(key, [])):
                    options.append(Option(turn_label(rec), id=option_id((*key, n))))
                if key in records:
                    options.append(Option(turn_label(records[key], confirmed.get(key)), id=option_id(key)))
            if lv is not None and (traj, lv.turn) not in records:
                options.append(Option(live_label(lv.turn, lv.phase), id=option_id((traj, lv.turn))))
        with self.prevent(OptionList.OptionHighlighted):
            self.set_options(options)
            if highlighted is not None:
                self.select_key(parse_option_id(highlighted), quiet=True)

    def wanted_width(self) -> int:
        """Cells the list needs for the labels it has."""
        labels = [option.prompt for option in self.options]
        return width_for(max((p.cell_length if isinstance(p, Content) else len(str(p)) for p in labels), default=0))

    @staticmethod
    def run_width(turns: int, trajectories: int) -> int:
        """Cells the list needs for any label a run of that size can have: set once, so that the
        panes beside it keep their width while the run goes on."""
        heading = len(f"trajectory {max(trajectories - 1, 0)} best 9.99x") if trajectories > 1 else 0
        return width_for(max(widest_turn_label(turns), heading))

    def select_key(self, key: Key | None, *, quiet: bool = False) -> None:
        if key is None:
            return
        try:
            index = self.get_option_index(option_id(key))
        except OptionDoesNotExist:
            return
        if quiet:
            with self.prevent(OptionList.OptionHighlighted):
                self.highlighted = index
        else:
            self.highlighted = index

    @property
    def highlighted_key(self) -> Key | None:
        opt = self.highlighted_option
        return parse_option_id(opt.id) if opt is not None else None
