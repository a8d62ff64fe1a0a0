"""The join between the trigger and the planner of recurring instances.

The trigger (:mod:`timewheel.trigger`) fires instances and pre-warms herds; what a fired or
prepared instance does is the planner's decision (:class:`~timewheel.recurring.Recurring`). They
meet through :class:`InstancePlanner` and the plans it returns; :class:`Herd` is the snapshot of a
herd that the trigger reports (``Scheduler.herds()``, ``timewheel inspect``, the dashboard).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from timewheel.task import Task

__all__ = ["FirePlan", "Herd", "InstancePlanner", "PreparePlan", "Warming"]


@dataclass(frozen=True, slots=True)
class FirePlan:
    """What to do with a batch of fired recurring instances (see :meth:`InstancePlanner.fire`).

    ``run`` are ids to move to READY, ``successors`` the next instances to insert in the same store
    step, ``skipped`` instances to cancel with the reason, ``missed`` the count of missed runs.
    ``expected`` maps prepared heads among ``run`` to the version they had when prepared: one
    promoted with another version was replaced meanwhile, and its successor is asked for again
    (:meth:`InstancePlanner.repair`).
    """

    run: list[str]
    successors: list[Task]
    skipped: list[tuple[Task, str]]
    missed: int
    expected: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PreparePlan:
    """What pre-warming a chunk of heads gave (see :meth:`InstancePlanner.prepare`).

    ``prepared`` are the heads whose firing is planned, ``successors`` their next instances to
    store now, ``deferred`` heads to ask about again later; the others need no preparing.
    """

    prepared: list[str]
    successors: list[Task]
    deferred: list[str]


class InstancePlanner(Protocol):
    """**Protocol:** decides what fired instances of recurring schedules do (``Recurring``)."""

    def fire(self, ids: Sequence[str], now: float) -> FirePlan:
        """Plan the fired instance ids: which run, which are skipped, the next instances."""
        ...

    def prepare(self, ids: Sequence[str], now: float) -> PreparePlan:
        """Prepare heads due soon: their successors, and what firing them will need."""
        ...

    def forget(self, ids: Sequence[str]) -> None:
        """Drop what was prepared for *ids* (unindexed, or their successors were not stored)."""
        ...

    def repair(self, tasks: Sequence[Task], now: float) -> list[Task]:
        """Successors for prepared heads promoted with an unexpected version (replaced)."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Herd:
    """A second holding a herd of recurring instances, and what pre-warming did for it.

    ``start`` is the second (epoch seconds); ``count`` the instances due in it (when
    pre-warming began, or now if it has not); ``state`` one of ``"ahead"`` (not yet within
    ``prewarm_ahead``), ``"warming"``, ``"warm"`` (everything that could be prepared is),
    ``"firing"`` (its instant came; heads are being promoted) and ``"fired"``. ``prepared``
    heads have their successor stored (``successors``) and left the wheel for the staging heap;
    ``deferred`` wait for an earlier instance of their series to fire; ``declined`` needed no
    preparing (not a fresh head of a running series); ``remaining`` are still to be looked at.
    ``work`` is the trigger time the slices took, ``slices`` how many there were, and
    ``longest_slice`` the longest one (seconds).
    """

    start: float
    count: int
    state: str
    prepared: int = 0
    successors: int = 0
    deferred: int = 0
    declined: int = 0
    remaining: int = 0
    work: float = 0.0
    slices: int = 0
    longest_slice: float = 0.0


@dataclass(slots=True)
class Warming:
    """A herd the trigger is pre-warming (mutable; :class:`Herd` is its snapshot)."""

    second: int
    placed: list[str]  # the second's per-second list itself: ids placed later are seen too
    next_at: float
    cursor: int = 0  # placed[:cursor] were looked at
    again: list[str] = field(default_factory=list)  # deferred ids being asked again
    deferred: list[str] = field(default_factory=list)
    retry_at: float = 0.0
    prepared: int = 0
    successors: int = 0
    declined: int = 0
    work: float = 0.0
    slices: int = 0
    longest_slice: float = 0.0
    per_slice: int = 64  # ids looked at by the last slice: the pacing's unit
    head_cost: float = 0.0  # the planner's recent seconds per id (0: not measured yet)
    done: bool = False
    reported: bool = False

    @property
    def count(self) -> int:
        """Instances placed in the second (an upper bound: some may have left since)."""
        return len(self.placed)

    @property
    def left(self) -> int:
        """Ids still to look at (deferred ones apart)."""
        return len(self.placed) - self.cursor + len(self.again)

    def chunk(self, most: int, room: float) -> int:
        """How many ids the next chunk asks the planner about: as many as *room* seconds allow at
        the cost per id measured so far, between 1 and *most* (4 before any measurement). The
        first instances of a rule across a DST gap cost the planner hundreds of microseconds
        each: a fixed chunk of them would make one slice long."""
        if not self.head_cost:
            return min(4, most)
        return max(1, min(most, int(max(0.0, room) / self.head_cost)))

    def measured(self, ids: int, seconds: float) -> None:
        """Count a chunk of *ids* that took *seconds*: the cost per id rises at once and falls
        slowly, so a run of cheap ids does not hide the next expensive one for long."""
        per_id = seconds / max(1, ids)
        self.head_cost = max(per_id, 0.7 * self.head_cost + 0.3 * per_id)

    def take(self, n: int) -> list[str]:
        """The next *n* ids to look at: deferred ones asked again first, then in placed order."""
        if self.again:
            taken = self.again[:n]
            del self.again[:n]
            return taken
        taken = self.placed[self.cursor : self.cursor + n]
        self.cursor += len(taken)
        return taken
