"""Herds: many recurring instances due at one instant, and what pre-warming does about them.

Before a herd's second, the trigger asks the recurring logic to *prepare* its heads
(:meth:`Recurring.prepare <timewheel.recurring.Recurring.prepare>`): each head's successor is
computed and stored ahead, and what was decided is kept in :class:`PreparedHeads`, so that
firing the herd does only what depends on the instant. This module holds that table and the
reports on a herd: :class:`HerdReport` (``Scheduler.herds``), :class:`HerdSchedules` (the rules
and schedules behind a set of instances) and :func:`stored_herd` (a herd read from a store alone,
for ``timewheel inspect``).
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from timewheel.errors import InvalidScheduleError
from timewheel.plans import Herd
from timewheel.rules import Misfire, RuleCache, rule_from_spec
from timewheel.shards import SHARD_MASK, SHARDS, ShardedDict
from timewheel.stores.base import Store
from timewheel.task import TaskState, schedule_of

__all__ = [
    "HerdReport",
    "HerdSchedules",
    "PreparedHead",
    "PreparedHeads",
    "StoredHerd",
    "describe_instances",
    "stored_herd",
]


@dataclass(frozen=True, slots=True)
class PreparedHead:
    """What pre-warming decided for a head instance before its slot (see
    :meth:`Recurring.prepare <timewheel.recurring.Recurring.prepare>`)."""

    schedule_id: str
    slot: float
    next_slot: float  # the successor's slot; the successor is stored
    successor: str
    version: int  # the head's version when prepared (it moves by one when promoted)
    policy: Misfire
    grace: float | None
    check_overlap: bool  # other instances of the series were live: ask the store at fire time


class PreparedHeads:
    """The pre-warmed heads of one runtime: what was decided for each (a :class:`PreparedHead`),
    the last prepared head of each series, and the head each stored successor follows.

    Preparing a successor before its head fired would put a third live instance in the series,
    so it waits (:meth:`waits`). The two maps are checked against the table, not kept exact:
    firing a herd then costs one dictionary operation per head. The three grow by a herd's size
    while it pre-warms, so they are sharded (:mod:`timewheel.shards`): no slice grows a table of
    100,000 entries in one go. Thread-safe.
    """

    __slots__ = ("_clean_next", "_early", "_heads", "_lock", "_table")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # head id -> what was decided (an entry leaves when its head fires)
        self._table: ShardedDict[str, PreparedHead] = ShardedDict()
        # per schedule, its last prepared head; per stored successor, the head it follows
        self._heads: ShardedDict[str, str] = ShardedDict()
        self._early: ShardedDict[str, str] = ShardedDict()
        self._clean_next = 0  # the part of _early the next clean-up looks at

    def __bool__(self) -> bool:
        return bool(self._table)

    def __len__(self) -> int:
        return len(self._table)

    def __contains__(self, task_id: object) -> bool:
        return task_id in self._table

    def take(
        self, ids: Sequence[str], now: float, run: list[str], expected: dict[str, int]
    ) -> tuple[list[str], list[tuple[str, PreparedHead]]]:
        """Sort fired *ids* out: a prepared head on time whose series had nothing else live and
        whose policy lets one due slot run goes to *run* (its prepared version to *expected*);
        the other prepared heads are returned with their entry (their instant decides), and the
        ids never prepared are returned first (the full plan decides). Taken entries leave."""
        if not self._table:
            return list(ids), []
        table = self._table.shards
        slow: list[str] = []
        asked: list[tuple[str, PreparedHead]] = []
        with self._lock:
            for tid in ids:
                entry = table[hash(tid) & SHARD_MASK].pop(tid, None)
                if entry is None:
                    slow.append(tid)
                elif (
                    now < entry.next_slot
                    and not entry.check_overlap
                    and (entry.policy is Misfire.RUN_ONCE or entry.grace is None)
                ):
                    run.append(tid)  # on time, nothing else live: it runs
                    expected[tid] = entry.version
                else:
                    asked.append((tid, entry))
        return slow, asked

    def waits(self, task_id: str, schedule_id: str) -> bool:
        """Whether head *task_id* of series *schedule_id* must wait: the series has a prepared
        head that has not fired yet (the maps are updated lazily: an entry whose head fired,
        and left the table, no longer counts)."""
        table = self._table
        before = self._early.get(task_id)
        return self._heads.get(schedule_id) in table or (before is not None and before in table)

    def keep(self, entries: Sequence[tuple[str, PreparedHead]]) -> None:
        """Remember what was decided for the heads of *entries*."""
        table, heads, early = self._table, self._heads.shards, self._early.shards
        with self._lock:
            if len(self._early) > 2 * len(table) + 1_000:
                # drop the entries of heads that fired, a part per call: the first slice of the
                # next herd would otherwise look at a whole herd's entries at once
                part, parts = early[self._clean_next], table.shards
                self._clean_next = (self._clean_next + 1) % SHARDS
                for gone in [
                    follows
                    for follows, head in part.items()
                    if head not in parts[hash(head) & SHARD_MASK]
                ]:
                    del part[gone]
            parts = table.shards
            for tid, entry in entries:
                parts[hash(tid) & SHARD_MASK][tid] = entry
                sid, successor = entry.schedule_id, entry.successor
                heads[hash(sid) & SHARD_MASK][sid] = tid
                early[hash(successor) & SHARD_MASK][successor] = tid

    def forget(self, ids: Sequence[str]) -> None:
        """Drop what was decided for heads *ids*."""
        with self._lock:
            for tid in ids:
                entry = self._table.pop(tid, None)
                if entry is not None:
                    if self._heads.get(entry.schedule_id) == tid:
                        del self._heads[entry.schedule_id]
                    self._early.pop(entry.successor, None)

    def forget_schedule(self, schedule_id: str) -> None:
        """Drop what was decided for the last prepared head of series *schedule_id*."""
        with self._lock:
            head = self._heads.pop(schedule_id, None)
            if head is not None:
                entry = self._table.pop(head, None)
                if entry is not None:
                    self._early.pop(entry.successor, None)


@dataclass(frozen=True, slots=True, kw_only=True)
class HerdSchedules:
    """The schedules behind a set of instances (see :meth:`Recurring.describe <timewheel.recurring.Recurring.describe>`).

    ``rules`` are ``(rule description, instances)`` pairs, most instances first; ``schedules``
    a few schedule ids as examples. ``examined`` instances were looked at out of ``total``:
    beyond :attr:`Recurring.DESCRIBE_LIMIT <timewheel.recurring.Recurring.DESCRIBE_LIMIT>` an even sample is examined and the counts are
    scaled to the total.
    """

    rules: tuple[tuple[str, int], ...]
    schedules: tuple[str, ...]
    examined: int
    total: int


@dataclass(frozen=True, slots=True, kw_only=True)
class HerdReport:
    """A herd of recurring instances due in one second, the schedules behind it, and what
    pre-warming has done (see ``Scheduler.herds``).

    ``herd`` is the trigger's view (count, state, prepared heads, successors stored, the work
    it took); ``schedules`` names the rules and a few schedule ids behind the instances still
    waiting (none once they fired). ``str()`` is a one-line warning.
    """

    at: datetime
    herd: Herd
    schedules: HerdSchedules

    def __str__(self) -> str:
        h, who = self.herd, self.schedules
        rules = "; ".join(f"{n:,} x {text}" for text, n in who.rules[:3])
        if len(who.rules) > 3:
            rules += f"; {len(who.rules) - 3} more rules"
        if who.examined < who.total:
            rules += f" (from a sample of {who.examined:,})"
        names = ", ".join(who.schedules)
        more = who.total - len(who.schedules)
        if names and more > 0:
            names += f" and {more:,} more"
        behind = f": {rules}; schedules {names}" if rules else ""
        if h.state == "ahead":
            done = "pre-warming starts when it is within the look-ahead"
        elif h.state in ("warming", "warm"):
            done = (
                f"pre-warming {'done' if h.state == 'warm' else 'under way'}: {h.prepared:,} "
                f"heads prepared, {h.successors:,} successors stored ahead, "
                f"{h.remaining + h.deferred:,} to go, {h.work:.2f} s of trigger work in "
                f"{h.slices} slices (longest {h.longest_slice * 1e3:.1f} ms)"
            )
        else:
            done = f"{h.state}: {h.prepared:,} heads were prepared ahead"
        when = self.at.isoformat().replace("+00:00", "Z")
        return f"herd: {h.count:,} recurring instances due at {when}{behind}; {done}"


def describe_instances(
    store: Store, ids: Sequence[str], *, limit: int = 10_000, rules: RuleCache | None = None
) -> HerdSchedules:
    """The schedules behind the instance *ids* of *store*: instances per rule description and a
    few schedule ids. Beyond *limit* ids an even sample is examined and counts are scaled."""
    total = len(ids)
    step = max(1, math.ceil(total / limit))
    sample = ids[::step]
    by_schedule: Counter[str] = Counter(schedule_of(tid) for tid in sample)
    by_rule: Counter[str] = Counter()
    described: dict[tuple[tuple[str, Any], ...], str] = {}
    for sid, n in by_schedule.items():
        rec = store.get_schedule(sid)
        if rec is None:
            by_rule["(schedule deleted)"] += n
            continue
        key = tuple(rec.rule.items())
        text = described.get(key)
        if text is None:
            try:
                rule = rule_from_spec(rec.rule) if rules is None else rules.from_spec(rec.rule)
                text = rule.describe()
            except InvalidScheduleError:  # a rule this version cannot read
                text = f"rule {dict(rec.rule)!r}"
            described[key] = text
        by_rule[text] += n
    scale = total / len(sample) if sample else 0.0
    return HerdSchedules(
        rules=tuple((text, round(n * scale)) for text, n in by_rule.most_common()),
        schedules=tuple(sorted(by_schedule)[:5]),
        examined=len(sample),
        total=total,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredHerd:
    """A herd as a store shows it (see :func:`stored_herd`): the schedules behind its PENDING
    instances, its one-shot tasks, and how many of the schedules checked (``checked``) already
    have their next instance stored behind the herd's (``prewarmed``): a running scheduler
    pre-warmed them."""

    schedules: HerdSchedules
    one_shot: int
    checked: int
    prewarmed: int


def stored_herd(
    store: Store, start: float, end: float, *, before: int, limit: int = 10_000
) -> StoredHerd:
    """What is behind the PENDING tasks of *store* due in ``[start, end)``, read from the store
    alone (``timewheel inspect``). *before* is about how many PENDING tasks are due before
    *start* (they are read past); at most *limit* of the herd's rows are read, and the
    pre-warming check looks at up to 200 of its schedules."""
    rows = store.due_before(end, limit=before + limit)
    herd = [(tid, sid) for tid, due, sid in rows if due >= start]
    instances = [tid for tid, sid in herd if sid is not None]
    described = describe_instances(store, instances, limit=limit)
    sids = sorted({schedule_of(tid) for tid in instances})
    checked = sids[:: max(1, math.ceil(len(sids) / 200))]
    prewarmed = 0
    for sid in checked:
        fresh = [
            t
            for t in store.tasks(state=TaskState.PENDING, schedule_id=sid)
            if t.attempts == 0 and not t.extra.get("catchup")
        ]
        if len(fresh) >= 2 and fresh[0].due < end <= fresh[1].due:
            prewarmed += 1
    return StoredHerd(
        schedules=described,
        one_shot=len(herd) - len(instances),
        checked=len(checked),
        prewarmed=prewarmed,
    )
