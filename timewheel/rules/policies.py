"""Misfire and overlap policies (:class:`Misfire`, :class:`Overlap`) and the one pure decision
function the scheduler applies them with, :func:`plan_misfires` (with :func:`runs_alone`, its
on-time case)."""

from __future__ import annotations

import dataclasses
import enum
import math
from collections import deque

from timewheel.errors import InvalidScheduleError
from timewheel.rules.base import Rule, finite_seconds
from timewheel.rules.interval import IntervalRule

__all__ = [
    "DEFAULT_SKIP_GRACE",
    "Misfire",
    "MisfirePlan",
    "Overlap",
    "plan_misfires",
    "runs_alone",
]


class Misfire(enum.Enum):
    """What to do with slots that came due while the scheduler was down or stalled.

    * ``RUN_ONCE`` (default): all due slots coalesce into one run, for the most recent one.
      Grace does not apply: a catch-up run always happens.
    * ``RUN_ALL``: each due slot not older than the grace runs, oldest first, at most
      ``max_runs`` of them (the most recent are kept).
    * ``SKIP``: the most recent due slot runs only if it is late by at most the grace
      (default :data:`DEFAULT_SKIP_GRACE`); otherwise nothing runs until the next slot.
    """

    RUN_ONCE = "run_once"
    RUN_ALL = "run_all"
    SKIP = "skip"

    @property
    def default_grace(self) -> float | None:
        """The grace used when the schedule gives none: 60 s for SKIP, unlimited otherwise."""
        return DEFAULT_SKIP_GRACE if self is Misfire.SKIP else None


DEFAULT_SKIP_GRACE = 60.0
"""Default grace for :attr:`Misfire.SKIP`, seconds (Quartz's misfire threshold).

Long enough that a GC pause, GIL contention or a busy worker pool never turns a run into a
skip (APScheduler's 1 s default does, and users hate it); short enough that after a real
outage a SKIP schedule does skip.
"""


class Overlap(enum.Enum):
    """What to do when a slot comes due while the previous run of the same schedule still runs.

    * ``SKIP`` (default): do not start a new instance; count the slot as skipped.
    * ``QUEUE``: start the new instance when the previous one finishes (one waiting at most).
    * ``ALLOW``: run concurrently, up to the schedule's ``max_instances``.
    """

    SKIP = "skip"
    QUEUE = "queue"
    ALLOW = "allow"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class MisfirePlan:
    """The decision of :func:`plan_misfires` for one schedule at one instant.

    ``run``: the slots to run now, increasing. ``due``: how many slots fell in
    ``(last_slot, now]`` (a lower bound when ``due_exact`` is False: counting a huge outage of
    a dense cron rule is capped). ``next_slot``: the first slot after ``now`` (None when the
    rule is exhausted). ``iterations``: how many rule evaluations the plan cost.
    """

    run: tuple[float, ...]
    due: int
    due_exact: bool
    next_slot: float | None
    iterations: int = 0

    @property
    def skipped(self) -> int:
        """Due slots that do not run (coalesced, expired or over the cap); see ``due_exact``."""
        return self.due - len(self.run)


_COUNT_LIMIT = 256  # cron slots counted one by one before the count becomes a lower bound


class _Counter:
    """Wraps ``rule.next_after`` to count evaluations."""

    __slots__ = ("calls", "rule")

    def __init__(self, rule: Rule) -> None:
        self.rule = rule
        self.calls = 0

    def __call__(self, t: float) -> float | None:
        self.calls += 1
        return self.rule.next_after(t)


def _latest_due(next_after: _Counter, last_slot: float, now: float) -> float | None:
    """The latest slot in ``(last_slot, now]``: gallop back from ``now``, then bisect."""
    s = next_after(last_slot)
    if s is None or s > now:
        return None
    width = 1.0
    while True:  # find a due slot as close to now as the gallop allows
        low = max(last_slot, now - width)
        found = next_after(low)
        if found is not None and found <= now:
            s = found
            break
        width *= 4
    high = now  # invariant: no due slot in (high, now], s is a due slot <= high
    while True:
        after = next_after(s)
        if after is None or after > now:
            return s
        mid = (s + high) / 2
        probe = next_after(mid)
        if probe is not None and probe <= now:
            s = probe  # a due slot beyond mid
        else:
            high, s = mid, after  # none in (mid, now]: the latest lies in (s, mid]


def runs_alone(slot: float, now: float, *, policy: Misfire, grace: float | None) -> bool:
    """Whether *slot* runs at *now* when it is the only slot due (the on-time case of
    :func:`plan_misfires`): always under ``RUN_ONCE`` or without a grace; under ``SKIP`` when
    at most *grace* late; under ``RUN_ALL`` when inside the grace window. Pure and O(1)."""
    if policy is Misfire.RUN_ONCE or grace is None:
        return True
    if policy is Misfire.SKIP:
        return now - slot <= grace
    return slot > math.nextafter(now - grace, -math.inf)  # as _recent_slots bounds RUN_ALL


def plan_misfires(
    rule: Rule,
    last_slot: float,
    now: float,
    *,
    policy: Misfire,
    grace: float | None,
    max_runs: int = 100,
    first: float | None = None,
) -> MisfirePlan:
    """Decide which of the slots in ``(last_slot, now]`` run now (pure; reads no clock).

    ``last_slot`` is the most recent slot already handled (run or decided). ``grace`` is how late
    (``now - slot``) a slot may still start, None for unlimited; pass ``policy.default_grace``
    when the schedule gives none. See :class:`Misfire` for the policies. ``max_runs`` caps
    ``RUN_ALL``. ``first``, when the caller already knows it, is the rule's first slot after
    ``last_slot`` (a cron rule asked about an instant before its last answer restarts its
    iterator, which costs far more than stepping on).

    Cost: O(1) for an :class:`IntervalRule`; for other rules two evaluations when at most one
    slot is due (the on-time case), else O(log(now - last_slot)) evaluations to find the latest
    due slot, plus at most 256 to count the due slots (beyond that ``due`` is a lower bound)
    and, for ``RUN_ALL``, a few times ``max_runs``.
    """
    last_slot, now = finite_seconds("last_slot", last_slot), finite_seconds("now", now)
    if grace is not None:
        grace = finite_seconds("grace", grace)
        if grace < 0:
            raise InvalidScheduleError(f"misfire grace must be >= 0 seconds (got {grace!r})")
    if isinstance(max_runs, bool) or not isinstance(max_runs, int) or max_runs < 1:
        raise InvalidScheduleError(f"max_runs must be an int >= 1 (got {max_runs!r})")
    if not isinstance(policy, Misfire):
        raise InvalidScheduleError(f"policy must be a Misfire (got {policy!r})")
    if isinstance(rule, IntervalRule):
        return _plan_interval(rule, last_slot, now, policy=policy, grace=grace, max_runs=max_runs)

    counter = _Counter(rule)
    if now > last_slot:
        s1 = first if first is not None else counter(last_slot)
        if s1 is None or s1 > now:  # nothing due
            return MisfirePlan(
                run=(), due=0, due_exact=True, next_slot=s1, iterations=counter.calls
            )
        s2 = counter(s1)
        if s2 is None or s2 > now:  # exactly one slot due: the on-time case
            one: tuple[float, ...] = (
                (s1,) if runs_alone(s1, now, policy=policy, grace=grace) else ()
            )
            return MisfirePlan(
                run=one, due=1, due_exact=True, next_slot=s2, iterations=counter.calls
            )
    next_slot = counter(now) if now >= last_slot else counter(last_slot)
    if now <= last_slot:
        return MisfirePlan(
            run=(), due=0, due_exact=True, next_slot=next_slot, iterations=counter.calls
        )
    latest = _latest_due(counter, last_slot, now)
    if latest is None:
        return MisfirePlan(
            run=(), due=0, due_exact=True, next_slot=next_slot, iterations=counter.calls
        )
    # count the due slots, one by one, up to a limit
    due, exact, s = 0, False, last_slot
    for _ in range(_COUNT_LIMIT):
        nxt = counter(s)
        if nxt is None or nxt > now:
            exact = True
            break
        due, s = due + 1, nxt
    if policy is Misfire.RUN_ONCE:
        run: tuple[float, ...] = (latest,)
    elif policy is Misfire.SKIP:
        run = (latest,) if grace is None or now - latest <= grace else ()
    else:
        run = _recent_slots(counter, last_slot, now, grace, max_runs)
    return MisfirePlan(
        run=run,
        due=max(due, len(run)),
        due_exact=exact,
        next_slot=next_slot,
        iterations=counter.calls,
    )


def _recent_slots(
    next_after: _Counter, last_slot: float, now: float, grace: float | None, max_runs: int
) -> tuple[float, ...]:
    """The most recent ``max_runs`` slots in ``(lower, now]``, lower = max(last_slot, now-grace)."""
    lower = last_slot
    if grace is not None:
        lower = max(lower, math.nextafter(now - grace, -math.inf))
    width = 60.0
    while True:
        begin = max(lower, now - width)
        window: deque[float] = deque(maxlen=max_runs)
        count, s = 0, begin
        while True:
            nxt = next_after(s)
            if nxt is None or nxt > now:
                break
            window.append(nxt)
            count, s = count + 1, nxt
        if count >= max_runs or begin <= lower:
            return tuple(window)
        width *= 8


def _plan_interval(
    rule: IntervalRule,
    last_slot: float,
    now: float,
    *,
    policy: Misfire,
    grace: float | None,
    max_runs: int,
) -> MisfirePlan:
    if rule.start is None:
        rule = rule.anchored(last_slot)
    next_slot = rule.next_after(max(now, last_slot))
    due = rule.count_between(last_slot, now)
    if due == 0:
        return MisfirePlan(run=(), due=0, due_exact=True, next_slot=next_slot, iterations=1)
    last_k = rule.index_after(now) - 1
    latest = rule.slot(last_k)
    if policy is Misfire.RUN_ONCE:
        run: tuple[float, ...] = (latest,)
    elif policy is Misfire.SKIP:
        run = (latest,) if grace is None or now - latest <= grace else ()
    else:
        first_k = rule.index_after(last_slot)
        if grace is not None:
            first_k = max(first_k, rule.index_after(math.nextafter(now - grace, -math.inf)))
        first_k = max(first_k, last_k - max_runs + 1)
        run = tuple(rule.slot(k) for k in range(first_k, last_k + 1))
    return MisfirePlan(run=run, due=due, due_exact=True, next_slot=next_slot, iterations=1)
