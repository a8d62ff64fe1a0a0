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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from timewheel.clock import to_datetime
from timewheel.errors import (
    InvalidScheduleError,
    TaskNotFoundError,
    VersionConflictError,
)
from timewheel.jobs import Job
from timewheel.rules import Misfire, Overlap, Rule, make_rule, plan_misfires, rule_from_spec
from timewheel.stores.base import Store
from timewheel.task import ScheduleRecord, Task, TaskState
from timewheel.trigger import FirePlan
from timewheel.validate import count, seconds

__all__ = [
    "Recurring",
    "RecurringHost",
    "Registry",
    "Schedule",
    "instance_id",
    "interval_of",
    "slot_of",
]

_P = TaskState.PENDING
_BUSY = (TaskState.READY, TaskState.RUNNING)


def instance_id(schedule_id: str, slot: float) -> str:
    """The deterministic id of a schedule's instance for *slot*."""
    return f"{schedule_id}@{round(slot * 1_000_000)}"


def slot_of(task_id: str) -> float:
    """The slot (epoch seconds) encoded in an instance id."""
    return int(task_id.rsplit("@", 1)[1]) / 1_000_000


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
    from timewheel.task import Retry

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


class Recurring:
    """The runtime's recurring-schedule logic: creating series, planning fired instances (the
    trigger's :class:`~timewheel.trigger.InstancePlanner`), pause, resume and delete. One per
    runtime; thread-safe."""

    def __init__(self, host: RecurringHost) -> None:
        self.host = host
        self._lock = threading.RLock()
        self._rules: dict[str, tuple[int, Rule]] = {}  # schedule id -> (version, rule)
        self._held: dict[str, list[str]] = {}
        self._rng = random.Random()

    @property
    def store(self) -> Store:
        """The host's store."""
        return self.host.store

    # -- rules and records ---------------------------------------------------------------------
    def rule(self, rec: ScheduleRecord) -> Rule:
        """The rule of *rec*, built once per schedule version (rules keep croniter iterators)."""
        with self._lock:
            got = self._rules.get(rec.id)
            if got is not None and got[0] == rec.version:
                return got[1]
            r = rule_from_spec(rec.rule)
            self._rules[rec.id] = (rec.version, r)
            return r

    def head(self, schedule_id: str) -> Task | None:
        """The pending head instance of a series, if any."""
        pend = self.store.tasks(state=_P, schedule_id=schedule_id)
        return pend[-1] if pend else None

    def create(
        self,
        func: Callable[..., Any] | str,
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any] | None,
        *,
        now: float,
        cron: str | None,
        every: float | timedelta | None,
        schedule_id: str | None,
        template: Task,
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
    ) -> Schedule:
        """Store a schedule and its first instance; see ``Scheduler.schedule``."""
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
        if every is not None and start is None:
            start = now
        rule = make_rule(cron=cron, every=every, tz=tz, start=start, end=end, jitter=jitter)
        sid = schedule_id if schedule_id is not None else default_schedule_id(func)
        if not isinstance(sid, str) or not sid or "@" in sid:
            raise InvalidScheduleError(
                f"schedule id must be a non-empty string without '@' (got {sid!r})"
            )
        options: dict[str, Any] = {
            "priority": template.priority,
            "queue": template.queue,
            "timeout": template.timeout,
            "retry": retry_to_spec(template.retry) if self.store.durable else template.retry,
            "misfire": misfire.value,
            "misfire_grace": grace,
            "overlap": overlap.value,
            "max_instances": max_instances,
            "max_runs": max_runs,
        }
        rec = ScheduleRecord(
            id=sid,
            func=template.func,
            args=template.args,
            kwargs=template.kwargs,
            rule=rule.to_spec(),
            options=options,
            created=now,
            updated=now,
        )
        store = self.store
        old = store.get_schedule(sid)
        if old is not None:
            if on_conflict == "keep" or _same_definition(old, rec):
                return Schedule(self, sid)  # re-registering the same schedule keeps its series
            if on_conflict == "error":
                from timewheel.errors import DuplicateKeyError

                raise DuplicateKeyError(
                    f"a schedule with id {sid!r} already exists; pass on_conflict='replace' "
                    "or 'keep', or another id="
                )
        first_slot = rule.next_after(now)
        first = None if first_slot is None else self._instance(rec, first_slot, rule)
        old_heads = [t.id for t in store.tasks(state=_P, schedule_id=sid)]
        stored = store.put_schedule(rec, first=first, on_conflict="replace")
        with self._lock:
            self._rules[sid] = (stored.version, rule)  # the first fire needs no rebuild
        self.host.unindex(old_heads)
        if first is not None:
            self.host.index(first)
        return Schedule(self, sid)

    def _instance(
        self, rec: ScheduleRecord, slot: float, rule: Rule, *, catchup: bool = False
    ) -> Task:
        o = rec.options
        retry = o.get("retry")
        if retry is None or isinstance(retry, Mapping):
            retry = retry_from_spec(retry)
        now = self.host.clock.time()
        due = slot if catchup else rule.jittered(slot, self._rng)
        return Task(
            id=instance_id(rec.id, slot),
            func=rec.func,
            args=rec.args,
            kwargs=rec.kwargs,
            due=due,
            retry=retry,
            priority=o.get("priority", 0),
            queue=o.get("queue", "default"),
            timeout=o.get("timeout"),
            created=now,
            updated=now,
            schedule_id=rec.id,
            extra={"slot": slot, "catchup": True} if catchup else {"slot": slot},
        )

    # -- firing ------------------------------------------------------------------------------
    def fire(self, ids: Sequence[str], now: float) -> FirePlan:
        """Decide, for fired instance ids, which run, which are skipped, and the next heads."""
        store = self.store
        run: list[str] = []
        successors: list[Task] = []
        skipped: list[tuple[Task, str]] = []
        missed = 0
        for tid in ids:
            t = store.find(tid)
            if t is None or t.state is not _P:
                continue
            if t.schedule_id is None:  # an ordinary task whose id happens to contain "@"
                run.append(tid)
                continue
            rec = store.get_schedule(t.schedule_id)
            if rec is None:
                skipped.append((t, "its schedule was deleted"))
                continue
            if rec.paused:
                skipped.append((t, "its schedule is paused"))
                continue
            opts = rec.options
            if t.attempts > 0:
                # a retry, or a re-run after a lost lease: the same run continuing. Its slot was
                # planned and its successor materialized when it first fired; run it again.
                run.append(tid)
                continue
            if t.extra.get("catchup"):
                verdict = self._overlap(rec, 1, t)
                if verdict == "run":
                    run.append(tid)
                elif verdict == "skip":
                    missed += 1
                    skipped.append((t, "overlap: the previous run is still going"))
                continue
            rule = self.rule(rec)
            # the exact slot (the id rounds it to microseconds, enough to name it, not to
            # compare it with the rule's own arithmetic)
            slot = float(t.extra.get("slot", slot_of(tid)))
            policy = Misfire(opts.get("misfire", "run_once"))
            grace = opts.get("misfire_grace")
            if grace is None:
                grace = policy.default_grace
            plan = plan_misfires(
                rule,
                math.nextafter(slot, -math.inf),
                now,
                policy=policy,
                grace=grace,
                max_runs=opts.get("max_runs", 100),
                first=slot,  # known: the rule steps on from it instead of restarting
            )
            missed += plan.skipped
            runs = list(plan.run)
            next_slot = plan.next_slot
            if next_slot is not None:
                successors.append(self._instance(rec, next_slot, rule))
            if not runs:
                skipped.append((t, f"misfire: late by {now - slot:.3f} s, policy {policy.value}"))
                continue
            verdict = self._overlap(rec, len(runs), t)
            if verdict == "skip":
                missed += len(runs)
                skipped.append((t, "overlap: the previous run is still going"))
                continue
            if verdict == "hold":
                continue
            run.append(tid)
            for extra_slot in runs[1:]:
                successors.append(self._instance(rec, extra_slot, rule, catchup=True))
        return FirePlan(run, successors, skipped, missed)

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
        if paused:
            for t in store.tasks(state=_P, schedule_id=schedule_id):
                self.host.cancel(t.id)
            return
        rule = self.rule(rec)
        nxt = rule.next_after(self.host.clock.time())
        if nxt is not None:
            inst = self._instance(rec, nxt, rule)
            changed = store.insert(inst, on_conflict="keep")
            self.host.index(changed.task)

    def delete(self, schedule_id: str) -> bool:
        store = self.store
        heads = [t.id for t in store.tasks(state=_P, schedule_id=schedule_id)]
        ok = store.delete_schedule(schedule_id)
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
