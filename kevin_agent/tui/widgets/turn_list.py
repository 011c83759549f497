"""Trajectories and their turns, each with a status mark and the speedup."""

from __future__ import annotations

from textual.content import Content
from textual.widgets import OptionList
from textual.widgets.option_list import Option, OptionDoesNotExist

from ...results import TurnRecord
from ...formatting import fmt_speedup
from ..format import live_label, turn_label
from ..state import LiveTurn, TurnKey


def option_id(key: TurnKey) -> str:
    return f"t{key[0]}-{key[1]}"


def parse_option_id(option_id: str | None) -> TurnKey | None:
    if not option_id or not option_id.startswith("t") or "-" not in option_id:
        return None
    traj, turn = option_id[1:].split("-", 1)
    return int(traj), int(turn)


class TurnList(OptionList):
    """Rebuilt whole on each change (turns finish seconds apart), keeping the highlighted turn."""

    DEFAULT_CSS = """
    TurnList { height: 1fr; }
    """

    def show(
        self,
        records: dict[TurnKey, TurnRecord],
        live: dict[int, LiveTurn] | None = None,
        trajectories: list[int] | None = None,
    ) -> None:
        live = live or {}
        trajs = trajectories or sorted({t for t, _ in records} | set(live))
        highlighted = self.highlighted_option.id if self.highlighted_option is not None else None
        options: list[Option] = []
        for traj in trajs:
            turns = sorted(k for k in records if k[0] == traj)
            if len(trajs) > 1:
                speeds = [s for k in turns if (s := records[k].speedup) is not None]
                best = Content.styled(f" best {fmt_speedup(max(speeds))}", "$text-success") if speeds else ""
                options.append(Option(Content.assemble((f"trajectory {traj}", "bold"), best), id=f"traj-{traj}", disabled=True))
            for key in turns:
                options.append(Option(turn_label(records[key]), id=option_id(key)))
            lv = live.get(traj)
            if lv is not None and (traj, lv.turn) not in records:
                options.append(Option(live_label(lv.turn, lv.phase), id=option_id((traj, lv.turn))))
        with self.prevent(OptionList.OptionHighlighted):
            self.set_options(options)
            if highlighted is not None:
                self.select_key(parse_option_id(highlighted), quiet=True)

    def select_key(self, key: TurnKey | None, *, quiet: bool = False) -> None:
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
    def highlighted_key(self) -> TurnKey | None:
        opt = self.highlighted_option
        return parse_option_id(opt.id) if opt is not None else None
