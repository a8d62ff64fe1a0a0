"""SIGKILL at random moments, on a real SQLite file: no task lost, none run beyond what an expired
lease explains, dependencies respected, the file intact.

CI size runs by default (well under a minute on 2 cores); the full size (1,000 kills of the
scheduler, more tasks and worker kills) runs with ``TIMEWHEEL_SLOW=1 pytest -m slow
tests/test_crash.py``.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

import timewheel as tw
from tests.apps import crash_app
from tests.apps.crash_app import record, register_series, start_logger, step
from timewheel.stores.sqlite import SQLiteStore
from timewheel.task import TERMINAL_STATES

S = tw.TaskState
FULL = bool(os.environ.get("TIMEWHEEL_SLOW"))
ROOT = Path(__file__).resolve().parent.parent
LEASE = 0.5

CTX = mp.get_context("spawn")  # a fresh interpreter: nothing of the test process is inherited


def _lines(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def _wait_until(cond: Callable[[], bool], what: str, cap: float) -> None:
    """Poll *cond* until true; fail the test after *cap* seconds."""
    deadline = time.monotonic() + cap
    while not cond():
        assert time.monotonic() < deadline, f"{what} not reached within {cap} s"
        time.sleep(0.01)


def _changed(store: SQLiteStore, before: dict[tw.TaskState, int]) -> Callable[[], bool]:
    return lambda: store.count_by_state() != before


# -- kill the scheduler between due and READY -------------------------------------------------------
def _kill_the_scheduler(tmp_path: Path, kills: int, tasks: int, seed: int) -> None:
    db = tmp_path / "kill.db"
    runs = tmp_path / "runs.log"  # R tag pid: the functions' own runs
    starts = tmp_path / "starts.log"  # S id attempts pid: every start, from a listener
    rng = random.Random(seed)
    t_begin = time.monotonic()
    now = time.time()
    spread = kills * 0.03  # due times cover the whole kill phase
    # never started: writes only
    setup = tw.Scheduler(store=SQLiteStore(db, durability="fast"), allow=["tests.apps"])
    ids = [f"t{k:05d}" for k in range(tasks)]
    for tid in ids:
        setup.schedule(record, tid, str(runs), at=now + rng.uniform(0.0, spread), id=tid)
    register_series(setup, str(runs))
    setup.shutdown()
    setup.store.close()

    store = SQLiteStore(db, durability="fast", busy_timeout=30)
    busy = 0  # victims that changed the store before they were killed
    before = store.count_by_state()
    conn, child_conn = CTX.Pipe()
    zygote = CTX.Process(target=crash_app.zygote, args=(child_conn,), daemon=True)
    zygote.start()

    def ask(msg: object) -> int:
        conn.send(msg)
        assert conn.poll(30), "the zygote process did not answer"
        answer: int = conn.recv()
        return answer

    try:
        for k in range(kills):
            inline = rng.random() < 0.5
            pid = ask(("fork", (str(db), str(runs), str(starts), inline, LEASE)))
            if k % 5 == 0:  # every fifth victim is killed only once it changed the store
                _wait_until(_changed(store, before), "victim progress", cap=30)
                time.sleep(rng.uniform(0.0, 0.01))
            else:  # the others at any moment, start-up included
                time.sleep(rng.uniform(0.002, 0.08))
            os.kill(pid, signal.SIGKILL)
            status = ask(("reap", pid))
            assert os.WIFSIGNALED(status), f"victim ended by itself (status {status:#x})"
            assert os.WTERMSIG(status) == signal.SIGKILL
            counts = store.count_by_state()
            busy += counts != before
            before = counts
    finally:
        conn.send(None)
        zygote.join(10)
        if zygote.exitcode is None:
            zygote.kill()
            zygote.join()
    kill_phase = time.monotonic() - t_begin
    assert store.integrity_check() == []

    # a last scheduler runs everything to completion
    final = tw.Scheduler(
        store=SQLiteStore(db, durability="fast", busy_timeout=30),
        dispatcher=tw.InlineDispatcher(),
        lease=LEASE,
        max_lease_recoveries=1_000_000,
        allow=["tests.apps"],
    )
    final.add_listener(start_logger(str(starts)), "started")
    register_series(final, str(runs))
    final.start()

    def finished() -> bool:
        final.run_pending()
        c = store.count_by_state()
        busy = c.get(S.READY, 0) + c.get(S.RUNNING, 0)
        # an instance re-queued by an expired lease is PENDING beside its series' head until it
        # fires (on the next tick): wait for one PENDING task per series and nothing else
        pending = {t.schedule_id for t in store.tasks(state=S.PENDING)}
        return (
            busy == 0
            and c.get(S.PENDING, 0) == len(crash_app.SERIES)
            and pending == set(crash_app.SERIES)
            and all(store.get(i).state is S.SUCCEEDED for i in ids)
        )

    try:
        _wait_until(finished, "every task SUCCEEDED, one head per series", cap=60)
    finally:
        final.shutdown()
        final.store.close()

    tasks_by_id = {t.id: t for t in store.tasks()}
    assert all(tasks_by_id[i].state is S.SUCCEEDED for i in ids), "no task lost"
    ran = Counter(f[1] for f in _lines(runs))
    started = Counter(f[1] for f in _lines(starts))
    reruns: dict[str, int] = {}
    for tid in ids:
        t = tasks_by_id[tid]
        # a claim comes first, then the start line, then the function: each can be cut short
        assert 1 <= ran[tid] <= started[tid] <= t.attempts, (tid, ran[tid], started[tid], t)
        if t.attempts > 1:
            reruns[tid] = t.attempts - 1  # no retry policy: only an expired lease re-queues
        assert t.result == tid
    # recurring series: one head each, no slot run twice
    series_runs = 0
    for sid in crash_app.SERIES:
        inst = [t for t in tasks_by_id.values() if t.schedule_id == sid]
        heads = [t for t in inst if t.state is S.PENDING]
        assert len(heads) == 1, f"{sid}: {len(heads)} pending heads: " + "; ".join(
            f"{t.id} {t.state.value} due={t.due:.6f} attempts={t.attempts} {t.error}"
            for t in inst[-8:]
        )
        assert all(t.state in (S.SUCCEEDED, S.CANCELLED) for t in inst if t not in heads)
        assert heads[0].due > max(t.due for t in inst if t not in heads)
        for t in inst:
            assert started[t.id] <= t.attempts, f"{t.id} started {started[t.id]}x"
            if t.state is S.SUCCEEDED:
                assert started[t.id] >= 1
                if t.attempts > 1:
                    reruns[t.id] = t.attempts - 1
            else:
                # a run cut short by a kill is re-queued and runs again: it is never skipped by
                # the misfire or overlap policy when it fires the second time
                assert not started[t.id], f"{t.id} started, then ended {t.state.value}: {t.error}"
        done = sum(t.state is S.SUCCEEDED for t in inst)
        assert done <= ran[sid] <= sum(started[t.id] for t in inst)
        series_runs += done
    assert not store.tasks(state=(S.READY, S.RUNNING, S.FAILED, S.TIMED_OUT))
    assert store.integrity_check() == []
    store.close()
    dups = sum(ran[i] - 1 for i in ids) + sum(
        started[t.id] - 1 for t in tasks_by_id.values() if t.schedule_id and started[t.id] > 1
    )
    print(
        f"\n{kills} SIGKILLs in {kill_phase:.1f} s over {tasks} tasks and "
        f"{len(crash_app.SERIES)} series ({series_runs} series runs); {busy} victims changed "
        f"the store before the kill; {len(reruns)} tasks re-run after an expired lease ({dups} "
        f"duplicate runs, each explained by one); total "
        f"{time.monotonic() - t_begin:.1f} s"
    )


def test_kill_the_scheduler_between_due_and_ready(tmp_path: Path) -> None:
    _kill_the_scheduler(tmp_path, kills=150, tasks=600, seed=7)


@pytest.mark.slow
@pytest.mark.skipif(not FULL, reason="full size: set TIMEWHEEL_SLOW=1")
def test_kill_the_scheduler_between_due_and_ready_full(tmp_path: Path) -> None:
    _kill_the_scheduler(
        tmp_path, kills=1_000, tasks=5_000, seed=int(os.environ.get("TIMEWHEEL_SEED", "8"))
    )


# -- SIGKILL during fan-in -------------------------------------------------------------------------
def _spawn_worker(env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "timewheel", "worker", "tests.apps.crash_app:make_worker"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def _fan_in(tmp_path: Path, parents: int, children: int, kills: int, seed: int) -> None:
    db = tmp_path / "fanin.db"
    log = tmp_path / "steps.log"
    rng = random.Random(seed)
    t_begin = time.monotonic()
    span = kills * 0.6 + 1.0  # parents finish throughout the kill phase
    ok = {f"p{k:03d}": rng.random() >= 0.1 for k in range(parents)}
    ups = {f"c{k:03d}": rng.sample(sorted(ok), rng.randint(3, 5)) for k in range(children)}
    now = time.time()
    with tw.Scheduler(store=SQLiteStore(db, durability="fast"), allow=["tests.apps"]) as producer:
        for pid, good in ok.items():
            pause = rng.uniform(0.01, 0.08)
            producer.schedule(
                step, pid, str(log), good, pause, at=now + 0.5 + rng.uniform(0, span), id=pid
            )
        for cid, after in ups.items():
            producer.schedule(step, cid, str(log), True, 0.01, after=after, id=cid)
        producer.shutdown(wait=False)
    producer.store.close()

    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        crash_app.DB_ENV: str(db),
        # a lease long enough that only a killed worker loses one (a live worker under CPU
        # starvation must not, or a stalled run could log its finish after a re-run's child)
        crash_app.LEASE_ENV: "2.0",
    }
    store = SQLiteStore(db, durability="fast", busy_timeout=30)
    all_ids = [*ok, *ups]

    def settled() -> bool:
        c = store.count_by_state()
        return sum(c.get(s, 0) for s in TERMINAL_STATES) == len(all_ids)

    workers = [_spawn_worker(env) for _ in range(2)]
    killed = 0
    outputs: list[str] = []
    try:
        deadline = time.monotonic() + span + 60
        while killed < kills:
            assert time.monotonic() < deadline, "the kill phase did not end"
            time.sleep(rng.uniform(0.3, 0.8))
            k = rng.randrange(len(workers))
            workers[k].send_signal(signal.SIGKILL)
            out, _ = workers[k].communicate(timeout=30)
            outputs.append(out.decode(errors="replace"))
            assert workers[k].returncode == -signal.SIGKILL, outputs[-1]
            killed += 1
            workers[k] = _spawn_worker(env)
        _wait_until(settled, f"every task terminal ({store.count_by_state()})", cap=60)
    finally:
        for w in workers:
            if w.poll() is None:
                w.send_signal(signal.SIGTERM)
        for w in workers:
            try:
                out, _ = w.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                w.kill()
                out, _ = w.communicate()
            outputs.append(out.decode(errors="replace"))
    for w in workers:
        assert w.returncode == 0, outputs[-1]

    tasks = {i: store.get(i) for i in all_ids}
    first_s: dict[str, int] = {}
    last_s: dict[str, int] = {}
    last_f: dict[str, int] = {}
    starts: Counter[str] = Counter()
    for n, (kind, tag, _pid) in enumerate(_lines(log)):
        if kind == "S":
            starts[tag] += 1
            first_s.setdefault(tag, n)
            last_s[tag] = n
        else:
            last_f[tag] = n
    for pid, good in ok.items():
        t = tasks[pid]
        assert t.state is (S.SUCCEEDED if good else S.FAILED), (pid, t.state, t.error)
        assert 1 <= starts[pid] <= t.attempts, (pid, starts[pid], t.attempts)
    reruns = {i: t.attempts - 1 for i, t in tasks.items() if t.attempts > 1}
    upstream_failed = 0
    for cid, after in ups.items():
        t = tasks[cid]
        if all(ok[p] for p in after):
            assert t.state is S.SUCCEEDED, (cid, t.state, t.error)
            assert 1 <= starts[cid] <= t.attempts, (cid, starts[cid], t.attempts)
            for p in after:  # every run of every parent ended before the child's first start
                assert last_f[p] < first_s[cid], f"{cid} started before {p} finished"
                assert last_s[p] < first_s[cid], f"{p} ran again after {cid} started"
        else:
            upstream_failed += 1
            assert t.state is S.UPSTREAM_FAILED, (cid, t.state, t.error)
            assert starts[cid] == 0, f"{cid} ran although a parent failed"
            assert t.attempts == 0
    assert store.integrity_check() == []
    store.close()
    print(
        f"\nfan-in: {parents} parents ({sum(not g for g in ok.values())} failing), {children} "
        f"children ({upstream_failed} upstream-failed), {killed} worker SIGKILLs; "
        f"{len(reruns)} tasks re-run after an expired lease "
        f"({sum(starts[i] - 1 for i in reruns)} duplicate starts, each explained by one); "
        f"{time.monotonic() - t_begin:.1f} s"
    )
    assert killed == kills
    assert all(starts[c] <= 1 + reruns.get(c, 0) for c in ups), "a child ran beyond its leases"
    assert not [c for c in ups if starts[c] > 1 and c not in reruns]


def test_sigkill_during_fan_in(tmp_path: Path) -> None:
    _fan_in(tmp_path, parents=50, children=50, kills=6, seed=11)


@pytest.mark.slow
@pytest.mark.skipif(not FULL, reason="full size: set TIMEWHEEL_SLOW=1")
def test_sigkill_during_fan_in_full(tmp_path: Path) -> None:
    _fan_in(tmp_path, parents=300, children=300, kills=40, seed=12)
