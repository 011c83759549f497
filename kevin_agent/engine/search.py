"""Search over trajectories: which histories each turn's slots continue.

``IndependentSearch`` is the paper's setting: every trajectory refines its own history for all
turns; a trajectory that exists at turn n-1 (a branch added mid-run, say) goes on at turn n.

``BeamSearch`` spends the slots on the most promising chains: after every turn the
trajectories are ranked by the score Kevin was trained with for that turn (0.3 x correct +
speedup x correct; among failures, the one that got further ranks higher), the best K are
kept, and the N slots of the next turn continue them, an equal share each (the best first
when N is not a multiple of K). Each copy carries its parent's full history and samples on its
own. The slots depend only on the records, so a resumed run continues the same chains.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..protocols import Slot
from ..results import Status, TurnRecord, continued_from

#: Failures ranked by how far the candidate got (higher is better); correct turns rank by score.
PROGRESS = {
    Status.PARSE_ERROR: 0,
    Status.CHECK_FAILED: 1,
    Status.COMPILE_ERROR: 2,
    Status.TIMEOUT: 3,
    Status.CANCELLED: 0,
    Status.RUNTIME_ERROR: 3,
    Status.INCORRECT: 4,
    Status.CORRECT: 5,
}


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


def reward(record: TurnRecord) -> float:
    """The score Kevin was trained with: 0.3 x correct + speedup x correct."""
    if not record.correct:
        return 0.0
    return 0.3 + (record.speedup or 0.0)


def rank_key(record: TurnRecord) -> tuple:
    """Sort key, best first: the training score, then how far a failure got, then the earlier trajectory."""
    return (-reward(record), -PROGRESS.get(record.status, 0), record.trajectory)


class IndependentSearch:
    name = "independent"
    branch_takes_slot = False

    def slots(self, turn: int, records: Sequence[TurnRecord], trajectories: int) -> list[Slot]:
        known = set(range(trajectories)) | {r.trajectory for r in records if r.turn == turn - 1}
        return [Slot(trajectory=t) for t in sorted(known)]


class BeamSearch:
    name = "beam"
    branch_takes_slot = True

    def __init__(self, width: int) -> None:
        if width < 1:
            raise ValueError("the beam width must be at least 1")
        self.width = width

    def kept(self, turn: int, records: Sequence[TurnRecord]) -> list[TurnRecord]:
        """The turn's best ``width`` records, best first."""
        return sorted((r for r in records if r.turn == turn), key=rank_key)[: self.width]

    def slots(self, turn: int, records: Sequence[TurnRecord], trajectories: int) -> list[Slot]:
        if turn == 1:
            return [Slot(trajectory=t) for t in range(trajectories)]
        kept = self.kept(turn - 1, records)
        if not kept:
            return []
        share, extra = divmod(trajectories, len(kept))
        parents = [rec.trajectory for i, rec in enumerate(kept) for _ in range(share + (1 if i < extra else 0))]
        return [Slot(trajectory=i, parent_trajectory=p) for i, p in enumerate(parents)]


def default_beam_width(trajectories: int) -> int:
    """A quarter of the trajectories, at least one."""
    return max(1, trajectories // 4)
