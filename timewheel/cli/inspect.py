"""``timewheel inspect``: what an operator needs to know about a store, read without changing
it (``--json`` for scripts)."""

from __future__ import annotations

import argparse
import json
import math
import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, TextIO

from timewheel.cli.common import (
    SCAN_LIMIT,
    USAGE,
    OpenedStore,
    fail,
    inspection,
    judge,
    open_url,
    ready_by_function,
)

if TYPE_CHECKING:
    from timewheel.refs import Allowlist
    from timewheel.stores.base import Store

__all__ = ["EPILOG", "run"]


EPILOG = """\
Shows tasks by state; PENDING tasks past due (nothing triggers the store); READY tasks waiting
for a worker, by function, with those this process cannot import (only modules inside --allow
are imported); stored functions no worker runs (refused by every allowlist, or by --allow);
recurring slots no scheduler triggered; the load per bucket over the horizon, with a warning for a thundering herd; the
latest failures with their errors. A store this user can only read is inspected from a
snapshot. Nothing is created: a missing store is an error.
"""

_MAX_BUCKETS = 10_000  # --horizon / --bucket: a histogram longer than this is a mistake
_OVERDUE_SLACK = 5.0  # a PENDING task this late means nothing triggers the store


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="seconds")


def _missed_slots(store: Store, now: float) -> list[dict[str, Any]]:
    """Recurring schedules whose pending instance is overdue: slots no scheduler triggered."""
    from timewheel.rules import rule_from_spec
    from timewheel.task import TaskState

    out: list[dict[str, Any]] = []
    for rec in store.list_schedules():
        if rec.paused:
            continue
        pending = store.tasks(state=TaskState.PENDING, schedule_id=rec.id, limit=1)
        if not pending or pending[0].due > now - _OVERDUE_SLACK:
            continue
        due = pending[0].due
        try:
            rule = rule_from_spec(rec.rule)
        except Exception:  # a rule this version cannot read: report the instance alone
            out.append({"schedule": rec.id, "rule": dict(rec.rule), "due": due, "missed": 1})
            continue
        missed, t, capped = 1, due, False
        while (t_next := rule.next_after(t)) is not None and t_next <= now:
            missed, t = missed + 1, t_next
            if missed >= 10_000:
                capped = True
                break
        out.append(
            {
                "schedule": rec.id,
                "rule": rule.describe(),
                "due": due,
                "missed": missed,
                "missed_is_lower_bound": capped,
            }
        )
    return out


def _refused(store: Store, allowlist: Allowlist | None) -> list[dict[str, Any]]:
    """Stored references of waiting tasks and schedules that no worker runs (with *allowlist*:
    no worker with that allowlist), judged on their text: nothing is imported."""
    from timewheel import refs
    from timewheel.task import TaskState

    waiting = (TaskState.PENDING, TaskState.READY)
    tasks: dict[str, int] = {}
    for t in store.tasks(state=waiting, limit=SCAN_LIMIT):
        tasks[t.func_name] = tasks.get(t.func_name, 0) + 1
    schedules: dict[str, int] = {}
    for rec in store.list_schedules():
        ref = rec.func if isinstance(rec.func, str) else refs.func_ref(rec.func)
        schedules[ref] = schedules.get(ref, 0) + 1
    out = []
    for ref in sorted(tasks.keys() | schedules.keys()):
        problem = refs.reference_problem(ref)
        if problem is None and allowlist is not None:
            problem = allowlist.problem(ref)
        if problem is not None:
            out.append(
                {
                    "function": ref,
                    "tasks": tasks.get(ref, 0),
                    "schedules": schedules.get(ref, 0),
                    "reason": problem,
                }
            )
    return out


def _collect(opened: OpenedStore, args: argparse.Namespace, now: float) -> dict[str, Any]:
    """Everything ``inspect`` shows, as plain data (also the ``--json`` document)."""
    from timewheel.refs import Allowlist, permit_imports
    from timewheel.report import herd_behind, load_report
    from timewheel.task import TaskState

    allowlist = Allowlist(m for group in args.allow for m in group) if args.allow else None
    if allowlist is not None:  # as in a worker: stored Retry types of these modules resolve
        permit_imports(allowlist.modules)
    store = opened.store
    inspect = inspection(store)
    counts = store.count_by_state()
    data: dict[str, Any] = {
        "store": repr(store),
        "now": now,
        "counts": {s.value: n for s, n in sorted(counts.items(), key=lambda kv: kv[0].value)},
    }
    overdue = store.due_before(now - _OVERDUE_SLACK, limit=SCAN_LIMIT)
    data["overdue_pending"] = {
        "count": len(overdue),
        "count_is_lower_bound": len(overdue) >= SCAN_LIMIT,
        "oldest_seconds": now - overdue[0][1] if overdue else None,
    }
    by_func, capped = ready_by_function(store)
    functions = []
    for ref, dues in sorted(by_func.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        verdict = judge(ref, allowlist, imports=args.imports)
        functions.append(
            {
                "function": ref,
                "count": len(dues),
                "oldest_seconds": max(0.0, now - dues[0]),
                "refused": verdict.refused,
                "import_problem": verdict.import_problem,
                "import_checked": verdict.checked and verdict.refused is None,
            }
        )
    data["ready"] = {
        "count": counts.get(TaskState.READY, 0),
        "oldest_seconds": inspect.oldest_ready_age(now) if inspect is not None else None,
        "by_function": functions,
        "examined_all": not capped,
    }
    data["refused"] = _refused(store, allowlist)
    data["allow"] = None if allowlist is None else list(allowlist.modules)
    data["unresolvable"] = dict(inspect.unresolvable()) if inspect is not None else {}
    data["missed_slots"] = _missed_slots(store, now)
    if inspect is not None:
        load = load_report(inspect, now, horizon=args.horizon, bucket=args.bucket)
        herd = load["herd"]
        if herd is not None:
            herd.update(herd_behind(store, load, overdue=len(overdue)))
        data["load"] = load
        data["failures"] = [
            {
                "id": t.id,
                "state": t.state.value,
                "function": t.func_name,
                "attempts": t.attempts,
                "updated": t.updated,
                "error": t.error,
            }
            for t in inspect.recent_failures(args.failures)
        ]
    else:
        data["load"] = None
        data["failures"] = None
    return data


def _print_report(data: dict[str, Any], out: TextIO) -> None:
    print(f"store: {data['store']} (opened read-only: inspect changes nothing)", file=out)
    print("tasks by state:", file=out)
    if not data["counts"]:
        print("  (none)", file=out)
    for state, n in data["counts"].items():
        print(f"  {state:<16} {n}", file=out)

    overdue = data["overdue_pending"]
    if overdue["count"]:
        more = "at least " if overdue["count_is_lower_bound"] else ""
        print(
            f"overdue: {more}{overdue['count']} PENDING tasks past due, the oldest by "
            f"{overdue['oldest_seconds']:.1f} s; no scheduler is triggering this store: start "
            "a worker (timewheel worker) or a scheduler on it",
            file=out,
        )
    ready = data["ready"]
    age = ready["oldest_seconds"]
    print(
        f"oldest READY task: {'none' if age is None else f'{age:.1f} s past due'}"
        + (f" ({ready['count']} READY waiting for a worker)" if ready["count"] else ""),
        file=out,
    )
    unchecked = False
    for f in ready["by_function"][:20]:
        if f["refused"]:
            flag = f": no worker runs it ({f['refused']})"
        elif f["import_problem"]:
            flag = f": cannot be imported here ({f['import_problem']})"
        else:
            flag = ""
            unchecked = unchecked or not f["import_checked"]
        print(
            f"  {f['count']:>8} READY {f['function']}, oldest {f['oldest_seconds']:.1f} s{flag}",
            file=out,
        )
    if unchecked:
        print(
            "  (import paths outside --allow were not imported to check them: pass --allow "
            "with the modules your workers allow)",
            file=out,
        )
    for r in data["refused"]:
        print(
            f"refused function {r['function']!r}: {r['tasks']} waiting task(s), "
            f"{r['schedules']} schedule(s); no worker runs it (a worker that claims one ends it "
            f"FAILED without importing it): {r['reason']}",
            file=out,
        )
    for ref, n in data["unresolvable"].items():
        print(f"unresolvable function {ref!r}: {n} READY tasks wait for it", file=out)
    for m in data["missed_slots"]:
        more = "+" if m.get("missed_is_lower_bound") else ""
        print(
            f"missed: schedule {m['schedule']!r} ({m['rule']}): {m['missed']}{more} slot(s) "
            f"since {_iso(m['due'])} not triggered; start a worker or a scheduler on this store "
            "(its misfire policy decides what runs)",
            file=out,
        )

    load = data["load"]
    if load is None:
        print("(this store offers no load histogram or failure list)", file=out)
        return
    print(
        f"expected load, next {load['horizon'] / 60:.0f} min in {load['bucket']:.0f} s "
        f"buckets: {load['total']} tasks, peak {load['peak']}",
        file=out,
    )
    peak = load["peak"]
    for start, n in load["buckets"]:
        if n:
            bar = "#" * max(1, round(40 * n / peak))
            stamp = datetime.fromtimestamp(start, timezone.utc).strftime("%H:%M:%S")
            print(f"  {stamp}Z {n:>8} {bar}", file=out)
    herd = load["herd"]
    if herd is not None:
        print(
            f"herd warning: {herd['count']} tasks due in the {load['bucket']:g} s from "
            f"{_iso(herd['start'])} ({herd['times_average']:.0f}x the average); spread them "
            "(jitter=, or a random delay) or have enough workers ready",
            file=out,
        )
        _print_herd(herd, out)
    failures = data["failures"]
    print(f"latest failures ({len(failures)}):", file=out)
    for t in failures:
        print(f"  {_iso(t['updated'])} {t['id']} {t['state']}: {t['error']}", file=out)


def _print_herd(herd: dict[str, Any], out: TextIO) -> None:
    sampled = herd["instances_examined"] < herd["instances"]
    about = "about " if sampled else ""
    for text, n in herd["rules"][:5]:
        print(f"  {about}{n} instances of {text}", file=out)
    if len(herd["rules"]) > 5:
        print(f"  ... and {len(herd['rules']) - 5} more rules", file=out)
    if herd["one_shot"]:
        print(f"  {herd['one_shot']} one-shot tasks", file=out)
    if herd["schedules"]:
        more = herd["instances"] - len(herd["schedules"])
        names = ", ".join(herd["schedules"]) + (f" and {more} more" if more > 0 else "")
        print(f"  schedules: {names}", file=out)
    checked = herd["prewarm_checked"]
    if checked:
        done = herd["prewarmed"]
        state = (
            "a running scheduler pre-warmed them (next instances already stored)"
            if done == checked
            else "not pre-warmed yet (a scheduler does it in the minutes before)"
            if done == 0
            else "pre-warming under way"
        )
        print(
            f"  pre-warming: {done} of {checked} schedules checked have their next instance "
            f"stored ahead: {state}",
            file=out,
        )


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Inspect the store *args.store* names, printing the report (or JSON) on *out*."""
    from timewheel.errors import TimewheelError

    if args.horizon / args.bucket > _MAX_BUCKETS:
        fail(
            f"--horizon {args.horizon:g} / --bucket {args.bucket:g} makes "
            f"{math.ceil(args.horizon / args.bucket)} buckets, more than {_MAX_BUCKETS}; "
            "use wider buckets",
            USAGE,
        )
    opened = open_url(args.store, read_only_ok=True)
    try:
        data = _collect(opened, args, time.time())
    except TimewheelError as e:
        fail(f"{e}")
    finally:
        opened.close()
    if args.json:
        json.dump(data, out, indent=2, sort_keys=True)
        out.write("\n")
    else:
        _print_report(data, out)
    return 0
