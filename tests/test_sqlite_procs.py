"""Several processes on one SQLiteStore file: no double claims, and crash recovery by lease expiry.

CI size runs by default; the full size (8 processes x 100,000 claims) runs with
``TIMEWHEEL_SLOW=1 pytest -m slow tests/test_sqlite_procs.py``.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import signal
import time
from collections import Counter
from multiprocessing.synchronize import Barrier, Event
from pathlib import Path

import pytest

from timewheel._contract import FUNC
from timewheel.errors import VersionConflictError
from timewheel.stores.sqlite import SQLiteStore
from timewheel.task import Task, TaskState

S = TaskState
CTX = mp.get_context("spawn")  # fresh interpreters: nothing inherited but the file path
FULL = bool(os.environ.get("TIMEWHEEL_SLOW"))


def _fill(path: Path, n: int, now: float) -> None:
    store = SQLiteStore(path, durability="fast")
    batch = 5000
    for start in range(0, n, batch):
        ids = [f"t{i:07d}" for i in range(start, min(n, start + batch))]
        # due when made: stored READY
        store.insert_many([Task(id=i, func=FUNC, due=now, created=now) for i in ids])
    store.close()


# -- claim race ----------------------------------------------------------------------------------------
def _claimer(path: str, owner: str, out: str, seed: int, start: Barrier) -> None:
    store = SQLiteStore(path, durability="fast", busy_timeout=30)
    rng = random.Random(seed)
    # every process claims from the same moment: on a loaded host the first ones up could
    # otherwise drain the queue before the last one has started, and nothing would race
    start.wait(120)
    claimed: list[str] = []
    while True:
        now = time.time()
        got = store.claim_next(
            owner=owner, lease_expires=now + 600, now=now, limit=rng.choice((1, 4, 16, 32))
        )
        if not got:
            break
        claimed.extend(t.id for t in got)
    Path(out).write_text("\n".join(claimed))
    store.close()


def _claim_race(tmp_path: Path, procs: int, tasks: int, timeout: float) -> None:
    db = tmp_path / "race.db"
    _fill(db, tasks, time.time())
    outs = [tmp_path / f"claimed-{k}.txt" for k in range(procs)]
    start = CTX.Barrier(procs)
    workers = [
        CTX.Process(target=_claimer, args=(str(db), f"w{k}", str(outs[k]), k, start))
        for k in range(procs)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout)
        assert w.exitcode == 0, f"claimer {w.name} ended with {w.exitcode}"
    per_worker = [o.read_text().split("\n") if o.read_text() else [] for o in outs]
    flat = [i for ids in per_worker for i in ids]
    dups = [i for i, n in Counter(flat).items() if n > 1]
    assert not dups, f"{len(dups)} tasks claimed twice, e.g. {dups[:5]}"
    assert len(flat) == tasks, f"{len(flat)} of {tasks} claimed"
    assert all(per_worker), "every process claimed something (they really raced)"
    store = SQLiteStore(db)
    try:
        assert store.integrity_check() == []
        assert store.count_by_state() == {S.RUNNING: tasks}
        owners = {t.id: t.lease_owner for t in store.tasks(state=S.RUNNING)}
        for k, ids in enumerate(per_worker):
            assert all(owners[i] == f"w{k}" for i in ids), "the store agrees on who claimed what"
        assert all(t.attempts == 1 and t.version == 1 for t in store.tasks())
    finally:
        store.close()


def test_processes_claim_without_double_claims(tmp_path: Path) -> None:
    _claim_race(tmp_path, procs=4, tasks=20_000, timeout=120)


@pytest.mark.slow
@pytest.mark.skipif(not FULL, reason="full size: set TIMEWHEEL_SLOW=1")
def test_processes_claim_without_double_claims_full(tmp_path: Path) -> None:
    _claim_race(tmp_path, procs=8, tasks=800_000, timeout=1800)


# -- crash and recovery ------------------------------------------------------------------------------
def _runner(path: str, owner: str, log: str, lease: float, stop: Event) -> None:
    """Claim, 'run' (a short sleep), finish; log S(tart), D(one) or X (outcome discarded)."""
    store = SQLiteStore(path, durability="fast", busy_timeout=30)
    with open(log, "a", buffering=1) as f:
        while not stop.is_set():
            now = time.time()
            got = store.claim_next(owner=owner, lease_expires=now + lease, now=now, limit=4)
            if not got:
                time.sleep(0.005)
                continue
            for t in got:
                f.write(f"S {t.id} {owner}\n")
                time.sleep(0.002)
                ch = store.finish(t.id, owner=owner, state=S.SUCCEEDED, now=time.time())
                f.write(f"{'D' if ch is not None else 'X'} {t.id} {owner}\n")
    store.close()


def test_killed_workers_lose_no_task(tmp_path: Path) -> None:
    n_tasks, n_workers, kills, lease = 2000, 3, 4, 1.0
    db = tmp_path / "crash.db"
    _fill(db, n_tasks, time.time())
    store = SQLiteStore(db, durability="fast", busy_timeout=30)
    stop = CTX.Event()
    rng = random.Random(1234)
    serial = iter(range(1000))
    logs: list[Path] = []

    def spawn() -> tuple[mp.process.BaseProcess, Path]:
        k = next(serial)
        logs.append(tmp_path / f"w{k}.log")
        p = CTX.Process(target=_runner, args=(str(db), f"w{k}", str(logs[-1]), lease, stop))
        p.start()
        return p, logs[-1]

    workers = [spawn() for _ in range(n_workers)]
    requeued: Counter[str] = Counter()
    killed: list[str] = []
    next_kill = time.monotonic()
    deadline = time.monotonic() + 300  # a bound against hanging on a loaded host, not a timing
    try:
        while True:
            assert time.monotonic() < deadline, f"no drain in time: {store.count_by_state()}"
            now = time.time()
            # the reaper: expired leases go back to PENDING (a CAS: a late finish may win)
            for t in store.expired_leases(now, limit=500):
                try:
                    store.transition(
                        t.id,
                        expected_version=t.version,
                        state=S.PENDING,
                        now=now,
                        lease_owner=None,
                        lease_expires=None,
                        error=f"lease of {t.lease_owner} expired",
                    )
                    requeued[t.id] += 1
                except VersionConflictError:
                    pass
            due = [i for i, *_ in store.due_before(now + 0.001, limit=1000)]
            if due:
                store.promote(due, now)
            busy = [k for k, (_, log) in enumerate(workers) if log.exists() and log.stat().st_size]
            if len(killed) < kills and time.monotonic() >= next_kill and busy:
                victim = rng.choice(busy)  # a worker that is claiming and finishing
                p = workers[victim][0]
                assert p.pid is not None
                os.kill(p.pid, signal.SIGKILL)
                p.join()
                killed.append(workers[victim][1].stem)  # the owner name, e.g. 'w3'
                workers[victim] = spawn()
                next_kill = time.monotonic() + rng.uniform(0.3, 0.8)
            counts = store.count_by_state()
            if len(killed) == kills and counts.get(S.SUCCEEDED, 0) == n_tasks:
                break
            time.sleep(0.05)
    finally:
        stop.set()
        for p, _ in workers:
            p.join(10)
            if p.exitcode is None:
                p.kill()
                p.join()

    assert len(killed) == kills
    tasks = {t.id: t for t in store.tasks()}
    assert len(tasks) == n_tasks, "no task lost"
    assert all(t.state is S.SUCCEEDED for t in tasks.values()), "every task ended"
    starts: Counter[str] = Counter()
    done: Counter[str] = Counter()
    last_start: dict[str, str] = {}
    for log in logs:
        if not log.exists():
            continue
        for line in log.read_text().splitlines():
            kind, tid, owner = line.split()
            if kind == "S":
                starts[tid] += 1
                last_start[tid] = owner
            elif kind == "D":
                done[tid] += 1
    for tid in set(tasks) - set(done):  # finished, then killed before it could log "D"
        assert last_start.get(tid) in killed, f"{tid} succeeded but no live worker logged it"
    assert all(n == 1 for n in done.values()), "only one run's outcome is kept per task"
    dup_runs = {tid: n - 1 for tid, n in starts.items() if n > 1}
    for tid, extra in dup_runs.items():
        assert extra <= requeued[tid], f"{tid} ran {extra + 1}x but was re-queued {requeued[tid]}x"
    for tid, t in tasks.items():
        assert t.attempts == 1 + requeued[tid], f"{tid}: attempts {t.attempts}, {requeued[tid]}"
    assert requeued, "the kills left expired leases to recover"
    assert store.integrity_check() == []
    store.close()
    print(
        f"\n{n_tasks} tasks, {kills} SIGKILLs: {sum(requeued.values())} leases re-queued, "
        f"{len(dup_runs)} tasks ran more than once (each after an expired lease)"
    )
