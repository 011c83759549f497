"""Search over trajectories: which histories each turn's slots continue.

``IndependentSearch`` is the paper's setting: every trajectory refines its own history for all
turns. A trajectory that exists at turn n-1 (a branch added mid-run, say) goes on at turn n.
"""

from __future__ import annotations

from collections.abc import Sequence

from .protocols import Slot
from .results import TurnRecord, continued_from


def lineage(records: Sequence[TurnRecord], slot: Slot, turn: int) -> list[TurnRecord]:
    """The finished turns a slot's prompt carries, oldest first: followed back from the turn it
    continues through the parent of every turn."""
    by_key = {(r.trajectory, r.turn): r for r in records}
    chain: list[TurnRecord] = []
    key = continued_from(slot.trajectory, turn, slot.parent_trajectory, slot.parent_turn)
    while key is not None and (rec := by_key.get(key)) is not None:
        chain.append(rec)
        key = rec.previous()
    return chain[::-1]


class IndependentSearch:
    name = "independent"

    def slots(self, turn: int, records: Sequence[TurnRecord], trajectories: int) -> list[Slot]:
        known = set(range(trajectories)) | {r.trajectory for r in records if r.turn == turn - 1}
        return [Slot(trajectory=t) for t in sorted(known)]
