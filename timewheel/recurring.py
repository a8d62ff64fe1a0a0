"""Recurring schedules: the ``Schedule`` handle, ``Registry``, and how a series materializes.

A schedule stores its **rule**, never its future instances. At any time a live series has one
*head* instance: a PENDING task with id ``f"{schedule_id}@{slot_us}"`` (the slot in integer
microseconds). When the head fires, the scheduler:

1. asks :func:`timewheel.rules.plan_misfires` which slots in ``(head slot, now]`` run now (the misfire
   policy: ``RUN_ONCE`` coalesces, ``RUN_ALL`` runs each up to a cap, ``SKIP`` drops late ones) and
   counts the rest as missed fires;
2. applies the overlap policy against the series' READY/RUNNING instances (``skip`` the run,
   ``queue`` it until the previous run finishes, or ``allow`` up to ``max_instances``);
3. moves the head to READY (or cancels it as skipped) **in the same store step** that inserts the
   next head at the rule's first slot after ``now``.

Instance ids are deterministic, so a step repeated after a crash inserts nothing twice: a series is
never lost and never doubled. Retries of one run are retries of that instance and never delay the
next slot.
"""

from __future__ import annotations

import math
import random
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any, Protocol

from timewheel.clock import to_datetime
from timewheel.errors import (
    DuplicateKeyError,
    InvalidScheduleError,
    InvalidTransitionError,
    TaskNotFoundError,
    VersionConflictError,
)
from timewheel.herds import (
    HerdReport,
    HerdSchedules,
    PreparedHead,
    PreparedHeads,
    describe_instances,
)
from timewheel.jobs import Job
from timewheel.plans import FirePlan, Herd, PreparePlan
from timewheel.rules import (
    Misfire,
    Overlap,
    Rule,
    RuleCache,
    plan_misfires,
    rule_from_spec,
    runs_alone,
)
from timewheel.shapes import Series, SeriesShape, Shapes
from timewheel.stores.base import Store
from timewheel.task import (
    TERMINAL_STATES,
    Retry,
    ScheduleRecord,
    Task,
    TaskState,
    instance_suffix,
    new_instance,
    new_schedule_record,
    schedule_of,
    slot_of,
)
from timewheel.validate import count, seconds

__all__ = [
    "Recurring",
    "RecurringHost",
    "Registry",
    "Schedule",
    "interval_of",
]

_P = TaskState.PENDING
_BUSY = (TaskState.READY, TaskState.RUNNING)
_LIVE = (TaskState.PENDING, TaskState.READY, TaskState.RUNNING)
_COVERED = 10_000  # late plans remembered per runtime (see Recurring._covered)
_SHARED_OPTIONS = 1_024  # distinct option sets shared among schedules


def default_schedule_id(func: Callable[..., Any] | str) -> str:
    """``module:qualname`` of *func* (a recurring function's default id)."""
    if isinstance(func, str):
        return func
    mod = getattr(func, "__module__", None) or "__main__"
    name = getattr(func, "__qualname__", None) or getattr(func, "__name__", None)
    if name is None:
        raise InvalidScheduleError(f"cannot derive an id for {func!r}; pass id=")
    return f"{mod}:{name}"


def retry_to_spec(retry: Any) -> dict[str, Any] | None:
    """A JSON-friendly form of a ``Retry`` (``retry_on`` as ``module:qualname`` strings)."""
    if retry is None:
        return None
    from timewheel.refs import type_ref

    return {
        "max_attempts": retry.max_attempts,
        "backoff": retry.backoff,
        "delay": retry.delay,
        "cap": retry.cap,
        "jitter": retry.jitter,
        "retry_on": [type_ref(t) for t in retry.retry_on],
    }


def retry_from_spec(spec: Mapping[str, Any] | None) -> Any:
    """Rebuild a ``Retry`` from :func:`retry_to_spec` output."""
    from timewheel.refs import resolve_ref

    if spec is None:
        return Retry()
    d = dict(spec)
    types = tuple(resolve_ref(r) for r in d.pop("retry_on", ["builtins:Exception"]))
    return Retry(retry_on=types, **d)  # type: ignore[arg-type]


class Schedule:
    """A handle on a recurring schedule (cheap view: the scheduler and the id).

    ``next_run`` is the due time of the pending instance; ``last_job`` the most recent instance
    that was triggered. ``pause()`` stops new instances (the pending one is cancelled);
    ``resume()`` restarts the series at the rule's first slot after now; ``cancel()`` deletes the
    schedule and cancels its instances that have not started.
    """

    __slots__ = ("_recurring", "id")

    def __init__(self, recurring: Recurring, schedule_id: str) -> None:
        self._recurring = recurring
        self.id = schedule_id

    @property
    def record(self) -> ScheduleRecord:
        """The stored schedule. Raises ``TaskNotFoundError`` once it is cancelled."""
        rec = self._recurring.store.get_schedule(self.id)
        if rec is None:
            raise TaskNotFoundError(f"no schedule with id {self.id!r} (cancelled?)")
        return rec

    @property
    def rule(self) -> Rule:
        """The recurrence rule."""
        return self._recurring.rule(self.record)

    @property
    def paused(self) -> bool:
        """True while paused."""
        return self.record.paused

    @property
    def next_run(self) -> datetime | None:
        """When the next instance is due (None when paused, cancelled or exhausted)."""
        head = self._recurring.head(self.id)
        return None if head is None else to_datetime(head.due)

    @property
    def last_job(self) -> Job | None:
        """The most recently triggered instance (any state but PENDING), or None."""
        store = self._recurring.store
        tasks = [t for t in store.tasks(schedule_id=self.id) if t.state is not _P]
        if not tasks:
            return None
        latest = max(tasks, key=lambda t: (float(t.extra.get("slot", t.due)), t.updated))
        return self._recurring.host.job(latest.id)

    def jobs(self) -> list[Job]:
        """Handles of every stored instance, earliest due first."""
        job = self._recurring.host.job
        return [job(t.id) for t in self._recurring.store.tasks(schedule_id=self.id)]

    def pause(self) -> None:
        """Stop materializing instances; the pending instance is cancelled."""
        self._recurring.set_paused(self.id, True)

    def resume(self) -> None:
        """Resume at the rule's first slot after now."""
        self._recurring.set_paused(self.id, False)

    def run_now(self) -> Job:
        """Run the schedule once more, now, beside its series (the next regular run keeps its
        time; the overlap policy applies). Raises ``InvalidTransitionError`` while paused."""
        task = self._recurring.run_now(self.id)
        return self._recurring.host.job(task.id)

    def cancel(self) -> bool:
        """Delete the schedule and cancel its instances that have not started."""
        return self._recurring.delete(self.id)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Schedule)
            and other.id == self.id
            and other._recurring is self._recurring
        )

    def __hash__(self) -> int:
        return hash(self.id)

    def __repr__(self) -> str:
        rec = self._recurring.store.get_schedule(self.id)
        if rec is None:
            return f"<Schedule {self.id!r} cancelled>"
        nr = self.next_run
        state = "paused" if rec.paused else f"next {nr.isoformat() if nr else 'never'}"
        return f"<Schedule {self.id!r} {rule_from_spec(rec.rule).describe()} {state}>"


@dataclass
class _Entry:
    kind: str  # "cron" | "every"
    func: Callable[..., Any]
    options: dict[str, Any] = field(default_factory=dict)


class Registry:
    """Declare recurring functions in modules before any scheduler exists.

    ::

        jobs = timewheel.Registry()

        @jobs.cron("0 0 * * *", tz="Europe/Berlin")
        def nightly_report() -> None: ...

        # later, where the scheduler is built:
        sched.include(jobs)

    The decorators return the function unchanged (so durable stores can import it by name).
    """

    def __init__(self) -> None:
        self._entries: list[_Entry] = []

    def cron(self, expr: str, /, **options: Any) -> Callable[[Callable[..., Any]], Any]:
        """Register ``func`` to run on the cron expression *expr* (options as for
        ``Scheduler.schedule``)."""

        def wrap(func: Callable[..., Any]) -> Callable[..., Any]:
            self._entries.append(_Entry("cron", func, {"cron": expr, **options}))
            return func

        return wrap

    def every(
        self,
        interval: float | timedelta | None = None,
        /,
        *,
        seconds: float = 0,
        minutes: float = 0,
        hours: float = 0,
        days: float = 0,
        **options: Any,
    ) -> Callable[[Callable[..., Any]], Any]:
        """Register ``func`` to run every *interval* (or the sum of the keyword amounts)."""
        every = interval_of(interval, seconds, minutes, hours, days)

        def wrap(func: Callable[..., Any]) -> Callable[..., Any]:
            self._entries.append(_Entry("every", func, {"every": every, **options}))
            return func

        return wrap

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Any:
        return iter(self._entries)


def interval_of(
    interval: float | timedelta | None, seconds: float, minutes: float, hours: float, days: float
) -> float | timedelta:
    """The period of ``every(interval)`` or ``every(seconds=, minutes=, hours=, days=)``."""
    parts = seconds + 60 * minutes + 3600 * hours + 86400 * days
    if interval is not None and parts:
        raise InvalidScheduleError("pass an interval or seconds=/minutes=/hours=/days=, not both")
    if interval is not None:
        return interval
    if not parts:
        raise InvalidScheduleError("every() needs an interval, e.g. every(300) or every(minutes=5)")
    return float(parts)


class RecurringHost(Protocol):
    """**Protocol:** what :class:`Recurring` needs from the runtime it plans for."""

    @property
    def store(self) -> Store:
        """Where schedules and their instances live."""
        ...

    @property
    def clock(self) -> Any:
        """The runtime's clock (``time()`` is read)."""
        ...

    @property
    def timezone(self) -> str:
        """The default zone of cron schedules."""
        ...

    def index(self, task: Task) -> None:
        """Put a new PENDING instance in the trigger's wheel."""
        ...

    def unindex(self, ids: Sequence[str]) -> None:
        """Take instances out of the trigger's wheel."""
        ...

    def cancel(self, task_id: str) -> bool:
        """Cancel a PENDING or READY instance."""
        ...

    def job(self, task_id: str) -> Job:
        """A handle on an instance."""
        ...


@dataclass(slots=True)
class _Plan:
    """A FirePlan being built."""

    run: list[str] = field(default_factory=list)
    successors: list[Task] = field(default_factory=list)
    skipped: list[tuple[Task, str]] = field(default_factory=list)
    missed: int = 0
    expected: dict[str, int] = field(default_factory=dict)


class Recurring:
    """The runtime's recurring-schedule logic: creating series, planning fired instances (the
    trigger's :class:`~timewheel.trigger.InstancePlanner`), pre-warming herds, pause, resume and
    delete. One per runtime; thread-safe.

    Rules are shared by spec (:class:`~timewheel.rules.RuleCache`), and cron rules share their
    instants by expression and zone, so schedules with one rule compute each next slot once.
    """

    #: instances examined by :meth:`describe` before it samples
    DESCRIBE_LIMIT = 10_000

    def __init__(self, host: RecurringHost) -> None:
        self.host = host
        self._lock = threading.RLock()
        self._rules = RuleCache()
        # checked option sets -> what they make (shapes.py): a herd's calls share one
        self.shapes = Shapes()
        self._slots: dict[tuple[float, bool], tuple[str, Mapping[str, Any]]] = {}  # _slot_parts
        self._retries: dict[tuple[Any, ...], Any] = {}  # stored retry spec -> Retry
        # option values -> a shared read-only mapping of them (read without the lock)
        self._options: dict[tuple[Any, ...] | None, Mapping[str, Any]] = {}
        self._held: dict[str, list[str]] = {}
        self._rng = random.Random()
        # pre-warmed heads (herds.py): an entry leaves when its head fires
        self._prepared = PreparedHeads()
        # Late plans: schedule id -> (the instant of the plan, the slots it ran as catch-ups).
        # A fresh instance of the series with a slot at or before that instant was stored
        # ahead (pre-warmed) and its slot is decided already: it runs only as one of those
        # catch-ups. Bounded: the oldest are dropped (such instances fire at once).
        self._covered: OrderedDict[str, tuple[float, frozenset[float]]] = OrderedDict()

    @property
    def store(self) -> Store:
        """The host's store."""
        return self.host.store

    # -- rules and records ---------------------------------------------------------------------
    def rule(self, rec: ScheduleRecord) -> Rule:
        """The rule of *rec*, shared with every schedule whose rule has the same spec."""
        return self._rules.from_spec(rec.rule)

    def _options_of(
        self,
        template: Task,
        misfire: Misfire,
        grace: float | None,
        overlap: Overlap,
        max_instances: int,
        max_runs: int,
    ) -> Mapping[str, Any]:
        """A schedule's options as a read-only mapping shared by every schedule with the same
        (most of a herd's schedules have the same: one mapping instead of one dict each)."""
        retry = template.retry
        key: tuple[Any, ...] | None = (
            template.priority,
            template.queue,
            template.timeout,
            retry,
            misfire,
            grace,
            overlap,
            max_instances,
            max_runs,
        )
        try:
            shared = self._options.get(key)
        except TypeError:  # a retry policy that cannot be hashed: not shared
            key, shared = None, None
        if shared is None:
            options = {
                "priority": template.priority,
                "queue": template.queue,
                "timeout": template.timeout,
                "retry": retry_to_spec(retry) if self.store.durable else retry,
                "misfire": misfire.value,
                "misfire_grace": grace,
                "overlap": overlap.value,
                "max_instances": max_instances,
                "max_runs": max_runs,
            }
            shared = MappingProxyType(options)
            if key is not None:
                if len(self._options) >= _SHARED_OPTIONS:
                    self._options.clear()  # many distinct option sets: start over
                self._options[key] = shared
        return shared

    def _retry(self, spec: Mapping[str, Any] | None) -> Any:
        """The ``Retry`` of a stored spec, built once per distinct spec (its exception types
        are imported by name: too slow to do for every instance of a herd)."""
        if spec is None:
            key: tuple[Any, ...] = ()
        else:
            key = tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in spec.items())
        try:
            retry = self._retries.get(key)
        except TypeError:  # an unhashable part: build it every time
            return retry_from_spec(spec)
        if retry is None:
            retry = retry_from_spec(spec)
            if len(self._retries) >= _SHARED_OPTIONS:
                self._retries.clear()
            self._retries[key] = retry
        return retry

    def head(self, schedule_id: str) -> Task | None:
        """The pending head instance of a series, if any: its earliest fresh instance (a
        pre-warmed successor may already be stored behind it; catch-up runs and retries are
        not heads)."""
        pend = self.store.tasks(state=_P, schedule_id=schedule_id)
        for t in pend:
            if t.attempts == 0 and not t.extra.get("catchup"):
                return t
        return pend[-1] if pend else None

    def create(self, series: Series) -> Schedule:
        """Store a prepared schedule and its first instance; see ``Scheduler.schedule``. A
        series whose options were not seen before is shaped (every option checked) and its
        shape kept for the next calls with the same options."""
        shape = series.shape
        if shape is None:
            shape = self._shape(series)
            if series.key is not None:
                self.shapes.keep(series.key, shape)
        return self._place(series, shape)

    def _shape(self, series: Series) -> SeriesShape:
        """The shape of a series from its template and options, each checked."""
        template, options = series.template, series.options
        if template is None or options is None:
            raise TypeError("a series without a shape carries its template and options")
        return self._shape_of(
            template,
            series.now,
            cron=series.cron,
            every=series.every,
            on_conflict=series.on_conflict,
            **options,
        )

    def _shape_of(
        self,
        template: Task,
        now: float,
        *,
        cron: str | None,
        every: float | timedelta | None,
        on_conflict: str,
        tz: Any = None,
        start: datetime | float | None = None,
        end: datetime | float | None = None,
        jitter: float = 0.0,
        misfire: Misfire | str = Misfire.RUN_ONCE,
        misfire_grace: float | timedelta | None = None,
        overlap: Overlap | str = Overlap.SKIP,
        max_instances: int = 1,
        max_runs: int = 100,
    ) -> SeriesShape:
        try:
            misfire = Misfire(misfire) if not isinstance(misfire, Misfire) else misfire
        except ValueError:
            raise InvalidScheduleError(
                f"misfire must be one of {[m.value for m in Misfire]} (got {misfire!r})"
            ) from None
        try:
            overlap = Overlap(overlap) if not isinstance(overlap, Overlap) else overlap
        except ValueError:
            raise InvalidScheduleError(
                f"overlap must be one of {[o.value for o in Overlap]} (got {overlap!r})"
            ) from None
        grace = (
            None if misfire_grace is None else seconds(misfire_grace, "misfire_grace", minimum=0)
        )
        count(max_instances, "max_instances")
        count(max_runs, "max_runs")
        if template.after:
            raise InvalidScheduleError("after= does not apply to recurring schedules")
        if cron is not None and tz is None:
            tz = self.host.timezone
        anchored = every is not None and start is None  # at its creation: used once
        if anchored:
            start = now
        rule, spec = self._rules.make(
            cron=cron, every=every, tz=tz, start=start, end=end, jitter=jitter
        )
        return SeriesShape(
            rule=rule,
            spec=spec,
            options=self._options_of(template, misfire, grace, overlap, max_instances, max_runs),
            retry=template.retry,
            priority=template.priority,
            queue=template.queue,
            timeout=template.timeout,
            on_conflict=on_conflict,
            reusable=not anchored,
        )

    def _place(self, series: Series, shape: SeriesShape) -> Schedule:
        """Store the schedule of *series* and its first instance, and index that instance."""
        schedule_id, now = series.schedule_id, series.now
        sid = schedule_id if schedule_id is not None else default_schedule_id(series.func)
        if not isinstance(sid, str) or not sid or "@" in sid:
            raise InvalidScheduleError(
                f"schedule id must be a non-empty string without '@' (got {sid!r})"
            )
        store = self.host.store
        rec = new_schedule_record(
            sid, series.ref, series.args, series.kwargs, shape.spec, shape.options, now
        )
        rule = shape.rule
        first_slot = rule.next_after(now)
        first = (
            None
            if first_slot is None
            else self._instance(rec, first_slot, rule, now=now, shape=shape)
        )
        on_conflict = shape.on_conflict
        while True:
            old = store.get_schedule(sid)
            if old is None:
                # Inserted with "error", not "replace": another process registering the same
                # schedule between our read and this write must not have its just-due head
                # cancelled; its record is read again and compared like any existing one.
                try:
                    store.put_schedule(rec, first=first, on_conflict="error")
                except DuplicateKeyError:
                    continue
                break
            if on_conflict == "keep" or _same_definition(old, rec):
                return Schedule(self, sid)  # re-registering the same schedule keeps its series
            if on_conflict == "error":
                raise DuplicateKeyError(
                    f"a schedule with id {sid!r} already exists; pass on_conflict='replace' "
                    "or 'keep', or another id="
                )
            self._drop_stored_ahead(sid)
            old_heads = [t.id for t in store.tasks(state=_P, schedule_id=sid)]
            store.put_schedule(rec, first=first, on_conflict="replace")
            self._forget_schedule(sid)
            self.host.unindex(old_heads)
            break
        if first is not None:
            self.host.index(first)
        return Schedule(self, sid)

    def _instance(
        self,
        rec: ScheduleRecord,
        slot: float,
        rule: Rule,
        *,
        catchup: bool = False,
        now: float | None = None,
        shape: SeriesShape | None = None,
    ) -> Task:
        """The instance of *rec* for *slot*; its options from *shape* when the caller has it
        (what *rec*'s options were made from), else read from *rec*."""
        if shape is not None:
            retry: Any = shape.retry
            priority, queue, timeout = shape.priority, shape.queue, shape.timeout
        else:
            o = rec.options
            retry = o.get("retry")
            if retry.__class__ is not Retry and not isinstance(retry, Retry):
                retry = self._retry(retry)  # a durable store keeps the policy as its spec
            priority, queue, timeout = (
                o.get("priority", 0),
                o.get("queue", "default"),
                o.get("timeout"),
            )
        if now is None:
            now = self.host.clock.time()
        due = slot if catchup else rule.jittered(slot, self._rng)
        suffix, extra = self._slot_parts(slot, catchup)
        sid = rec.id
        return new_instance(
            sid + suffix,
            rec.func,
            rec.args,
            rec.kwargs,
            due,
            retry,
            priority,
            queue,
            timeout,
            now,
            sid,
            extra,
        )

    def _slot_parts(self, slot: float, catchup: bool) -> tuple[str, Mapping[str, Any]]:
        """What the instances of every schedule share for a slot: the id suffix
        (:func:`~timewheel.task.instance_suffix`) and ``extra`` (the slot, and whether it is a
        catch-up run) as a read-only mapping; a herd's heads and successors cost no dict each."""
        key = (slot, catchup)
        parts = self._slots.get(key)
        if parts is None:
            extra = {"slot": slot, "catchup": True} if catchup else {"slot": slot}
            parts = (instance_suffix(slot), MappingProxyType(extra))
            if len(self._slots) >= _SHARED_OPTIONS:
                self._slots.clear()  # many distinct slots: start over
            self._slots[key] = parts
        return parts

    # -- firing ------------------------------------------------------------------------------
    def fire(self, ids: Sequence[str], now: float) -> FirePlan:
        """Decide, for fired instance ids, which run, which are skipped, and the next heads.

        A head prepared by :meth:`prepare` has its successor stored already: unless it fires
        later than that successor's slot, only the misfire check of one due slot and, when the
        series had other live instances, the overlap check remain (both against *now*).
        """
        plan = _Plan()
        slow, asked = self._prepared.take(ids, now, plan.run, plan.expected)
        for tid, entry in asked:
            if now >= entry.next_slot:
                slow.append(tid)  # later than its successor: the full plan decides
            else:
                self._fire_prepared(tid, entry, now, plan)
        for tid in slow:
            self._fire_one(tid, now, plan)
        return FirePlan(plan.run, plan.successors, plan.skipped, plan.missed, plan.expected)

    def _fire_prepared(self, tid: str, entry: PreparedHead, now: float, plan: _Plan) -> None:
        if not runs_alone(entry.slot, now, policy=entry.policy, grace=entry.grace):
            plan.missed += 1
            t = self.store.find(tid)
            if t is not None and t.state is _P:
                late = f"late by {now - entry.slot:.3f} s, policy {entry.policy.value}"
                plan.skipped.append((t, f"misfire: {late}"))
            return
        if entry.check_overlap:
            store = self.store
            t = store.find(tid)
            if t is None or t.state is not _P:
                return
            rec = store.get_schedule(entry.schedule_id)
            if rec is None or rec.paused:
                self._fire_one(tid, now, plan)  # the full path says why it does not run
                return
            verdict = self._overlap(rec, 1, t)
            if verdict == "skip":
                plan.missed += 1
                plan.skipped.append((t, "overlap: the previous run is still going"))
                return
            if verdict == "hold":
                return
        plan.run.append(tid)
        plan.expected[tid] = entry.version

    def _fire_one(self, tid: str, now: float, plan: _Plan) -> None:
        store = self.store
        t = store.find(tid)
        if t is None or t.state is not _P:
            return
        if t.schedule_id is None:  # an ordinary task whose id happens to contain "@"
            plan.run.append(tid)
            return
        rec = store.get_schedule(t.schedule_id)
        if rec is None:
            plan.skipped.append((t, "its schedule was deleted"))
            return
        if rec.paused:
            plan.skipped.append((t, "its schedule is paused"))
            return
        opts = rec.options
        if t.attempts > 0:
            # a retry, or a re-run after a lost lease: the same run continuing. Its slot was
            # planned and its successor materialized when it first fired; run it again.
            plan.run.append(tid)
            return
        # the exact slot (the id rounds it to microseconds, enough to name it, not to
        # compare it with the rule's own arithmetic)
        slot = float(t.extra.get("slot", slot_of(tid)))
        catchup = bool(t.extra.get("catchup"))
        if not catchup:
            covered = self._covered.get(rec.id)
            if covered is not None and slot <= covered[0]:
                if slot not in covered[1]:
                    plan.skipped.append(
                        (t, f"superseded: the late run of its schedule at {now:.3f} covered it")
                    )
                    return
                catchup = True  # a catch-up slot of that run, stored ahead of it
        if catchup:
            verdict = self._overlap(rec, 1, t)
            if verdict == "run":
                plan.run.append(tid)
            elif verdict == "skip":
                plan.missed += 1
                plan.skipped.append((t, "overlap: the previous run is still going"))
            return
        rule = self.rule(rec)
        policy = Misfire(opts.get("misfire", "run_once"))
        grace = opts.get("misfire_grace")
        if grace is None:
            grace = policy.default_grace
        decided = plan_misfires(
            rule,
            math.nextafter(slot, -math.inf),
            now,
            policy=policy,
            grace=grace,
            max_runs=opts.get("max_runs", 100),
            first=slot,  # known: the rule steps on from it instead of restarting
        )
        plan.missed += decided.skipped
        runs = list(decided.run)
        if decided.due > 1 or not decided.due_exact:
            self._cover(rec.id, now, runs[1:])
        next_slot = decided.next_slot
        if next_slot is not None:
            plan.successors.append(self._instance(rec, next_slot, rule, now=now))
        if not runs:
            plan.skipped.append((t, f"misfire: late by {now - slot:.3f} s, policy {policy.value}"))
            return
        verdict = self._overlap(rec, len(runs), t)
        if verdict == "skip":
            plan.missed += len(runs)
            plan.skipped.append((t, "overlap: the previous run is still going"))
            return
        if verdict == "hold":
            return
        plan.run.append(tid)
        for extra_slot in runs[1:]:
            plan.successors.append(self._instance(rec, extra_slot, rule, catchup=True, now=now))

    def _cover(self, schedule_id: str, now: float, catchups: Sequence[float]) -> None:
        with self._lock:
            covered = self._covered
            covered[schedule_id] = (now, frozenset(catchups))
            covered.move_to_end(schedule_id)
            while len(covered) > _COVERED:
                covered.popitem(last=False)

    # -- pre-warming -----------------------------------------------------------------------------
    def prepare(self, ids: Sequence[str], now: float) -> PreparePlan:
        """Pre-warm head instances due soon: compute and return each one's successor (for the
        trigger to store before the head's slot) and remember what was decided, so that firing
        them does only what depends on the instant (see :meth:`fire`).

        Only fresh heads of running series are prepared. A head whose series already has a
        prepared head (its own predecessor, not fired yet) is *deferred*: preparing it would
        put a third live instance in the series; the trigger asks again later.
        """
        store = self.store
        entries: list[tuple[str, PreparedHead]] = []
        successors: list[Task] = []
        deferred: list[str] = []
        taken: set[str] = set()
        prepared = self._prepared
        for tid in ids:
            if tid in prepared:
                continue
            sid = schedule_of(tid)
            if sid in taken or prepared.waits(tid, sid):
                deferred.append(tid)
                continue
            # the series' live instances: the head among them, and whether any other is live
            # (then the overlap policy is asked again at the instant)
            live = store.tasks(state=_LIVE, schedule_id=sid)
            t = next((x for x in live if x.id == tid), None)
            if t is None or t.state is not _P or t.schedule_id != sid:
                continue
            if t.attempts > 0 or t.extra.get("catchup"):
                continue
            rec = store.get_schedule(sid)
            if rec is None or rec.paused:
                continue
            rule = self.rule(rec)
            exact = t.extra.get("slot")
            slot = float(exact) if exact is not None else slot_of(tid)
            next_slot = rule.next_after(slot)
            if next_slot is None:
                continue  # the series ends with this head: nothing to store ahead
            successor = self._instance(rec, next_slot, rule, now=now)
            opts = rec.options
            policy = Misfire(opts.get("misfire", "run_once"))
            grace = opts.get("misfire_grace")
            entries.append(
                (
                    tid,
                    PreparedHead(
                        schedule_id=sid,
                        slot=slot,
                        next_slot=next_slot,
                        successor=successor.id,
                        version=t.version,
                        policy=policy,
                        grace=policy.default_grace if grace is None else grace,
                        check_overlap=any(x.id != tid for x in live),
                    ),
                )
            )
            successors.append(successor)
            taken.add(sid)
        prepared.keep(entries)
        return PreparePlan([tid for tid, _ in entries], successors, deferred)

    def forget(self, ids: Sequence[str]) -> None:
        """Drop what :meth:`prepare` decided for *ids* (unindexed, or their successors could
        not be stored): they fire through the full plan."""
        self._prepared.forget(ids)

    def repair(self, tasks: Sequence[Task], now: float) -> list[Task]:
        """Successors for prepared heads that were replaced between their preparation and
        their promotion (their version moved; a replaced schedule cancels the pre-warmed
        successor): the next instance under the schedule as it is now."""
        store = self.store
        out: list[Task] = []
        for t in tasks:
            if t.schedule_id is None:
                continue
            rec = store.get_schedule(t.schedule_id)
            if rec is None or rec.paused:
                continue
            rule = self.rule(rec)
            slot = float(t.extra.get("slot", slot_of(t.id)))
            next_slot = rule.next_after(max(slot, now))
            if next_slot is not None:
                out.append(self._instance(rec, next_slot, rule, now=now))
        return out

    def report(self, herd: Herd, ids: Sequence[str]) -> HerdReport:
        """A :class:`HerdReport` for the trigger's *herd*, whose waiting instances are *ids*."""
        return HerdReport(at=to_datetime(herd.start), herd=herd, schedules=self.describe(ids))

    def _drop_stored_ahead(self, schedule_id: str) -> None:
        """Delete the instances pre-warming stored behind the series' head, before the series
        is paused, replaced or deleted: cancelled instead, they would keep their slot's id
        taken, and the next instance planned for that slot (after a resume, or by the
        replacing definition) would never be stored."""
        pending = self.store.tasks(state=_P, schedule_id=schedule_id)
        fresh = [t.id for t in pending if t.attempts == 0 and not t.extra.get("catchup")]
        ahead = fresh[1:]
        if ahead:
            self.host.unindex(ahead)
            for task_id in ahead:
                self.store.delete(task_id)

    def _forget_schedule(self, schedule_id: str) -> None:
        """The schedule was replaced, paused, resumed or deleted here: what was prepared or
        remembered for it no longer holds."""
        self._prepared.forget_schedule(schedule_id)
        with self._lock:
            self._covered.pop(schedule_id, None)

    def describe(self, ids: Sequence[str]) -> HerdSchedules:
        """The schedules behind instance *ids* (a herd): instances per rule, a few schedule
        ids. Beyond :attr:`DESCRIBE_LIMIT` ids an even sample is examined."""
        return describe_instances(self.store, ids, limit=self.DESCRIBE_LIMIT, rules=self._rules)

    def _overlap(self, rec: ScheduleRecord, n: int, t: Task) -> str:
        busy = [x for x in self.store.tasks(state=_BUSY, schedule_id=rec.id) if x.id != t.id]
        if not busy:
            return "run"
        policy = Overlap(rec.options.get("overlap", "skip"))
        if policy is Overlap.SKIP:
            return "skip"
        if policy is Overlap.ALLOW:
            return "run" if len(busy) + 1 <= rec.options.get("max_instances", 1) else "skip"
        with self._lock:
            self._held.setdefault(rec.id, []).append(t.id)
        return "hold"

    def release(self, schedule_id: str) -> list[str]:
        """Instances held by ``overlap="queue"`` that may run now the previous one finished."""
        with self._lock:
            return self._held.pop(schedule_id, [])

    # -- pause / resume / delete -------------------------------------------------------------------
    def set_paused(self, schedule_id: str, paused: bool) -> None:
        """Pause (cancel the pending instances) or resume (a head at the first slot after now)."""
        store = self.store
        while True:
            rec = store.get_schedule(schedule_id)
            if rec is None:
                raise TaskNotFoundError(f"no schedule with id {schedule_id!r}")
            if rec.paused == paused:
                return
            try:
                rec = store.update_schedule(
                    schedule_id,
                    expected_version=rec.version,
                    paused=paused,
                    updated=self.host.clock.time(),
                )
            except VersionConflictError:
                continue
            break
        self._forget_schedule(schedule_id)
        if paused:
            self._drop_stored_ahead(schedule_id)
            for t in store.tasks(state=_P, schedule_id=schedule_id):
                self.host.cancel(t.id)
            return
        rule = self.rule(rec)
        nxt = rule.next_after(self.host.clock.time())
        if nxt is not None:
            inst = self._instance(rec, nxt, rule)
            existing = store.find(inst.id)
            # the head cancelled by the pause has this slot's id when resumed before its slot
            replace = existing is not None and existing.state in TERMINAL_STATES
            changed = store.insert(inst, on_conflict="replace" if replace else "keep")
            self.host.index(changed.task)

    def run_now(self, schedule_id: str) -> Task:
        """An extra run of the schedule, due now, beside its series; returns the stored instance.

        It is a catch-up instance for the current instant (id ``instance_id(schedule_id,
        now)``, ``extra["catchup"]``): when it fires only the schedule's overlap policy is
        asked, no successor is planned, and the next regular run keeps its time. Inserted with
        ``on_conflict="keep"``: a second request in the same microsecond gets the same run.

        Raises:
            TaskNotFoundError: no such schedule.
            InvalidTransitionError: the schedule is paused (its instances do not run).
        """
        rec = self.store.get_schedule(schedule_id)
        if rec is None:
            raise TaskNotFoundError(f"no schedule with id {schedule_id!r}")
        if rec.paused:
            raise InvalidTransitionError(
                f"schedule {schedule_id!r} is paused: its runs are skipped; resume it first"
            )
        now = self.host.clock.time()
        inst = self._instance(rec, now, self.rule(rec), catchup=True, now=now)
        task = self.store.insert(inst, on_conflict="keep").task
        self.host.index(task)
        return task

    def delete(self, schedule_id: str) -> bool:
        """Delete the schedule and cancel its instances that have not started."""
        store = self.store
        self._drop_stored_ahead(schedule_id)
        heads = [t.id for t in store.tasks(state=_P, schedule_id=schedule_id)]
        ok = store.delete_schedule(schedule_id)
        self._forget_schedule(schedule_id)
        self.host.unindex(heads)
        with self._lock:
            self._held.pop(schedule_id, None)
        return ok


def _same_definition(a: ScheduleRecord, b: ScheduleRecord) -> bool:
    """True when two records describe the same series (ignoring bookkeeping and anchors)."""
    ra, rb = dict(a.rule), dict(b.rule)
    if ra.get("kind") == "interval":
        ra.pop("start", None)  # an interval's anchor is the first registration's time
        rb.pop("start", None)
    return (
        a.func == b.func
        and tuple(a.args) == tuple(b.args)
        and dict(a.kwargs) == dict(b.kwargs)
        and ra == rb
        and _norm(a.options) == _norm(b.options)
    )


def _norm(o: Mapping[str, Any]) -> dict[str, Any]:
    d = dict(o)
    r = d.get("retry")
    if r is not None and not isinstance(r, Mapping):
        d["retry"] = retry_to_spec(r)
    return d
