"""The command line, run as users run it: ``python -m timewheel ...`` in a real subprocess.

Timeouts here are hang guards only; no assertion depends on how long anything took.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import timewheel as tw
from tests.apps.cli_app import SIGNAL_DIR_ENV, hold, plain
from tests.apps.worker_app import fail
from timewheel import refs
from timewheel.cli import main
from timewheel.stores import SQLiteStore
from timewheel.testing import FakeClock

ROOT = Path(__file__).resolve().parent.parent
GUARD = 60.0  # seconds: only to stop a hung subprocess from hanging the suite


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), **extra}


def run(
    *args: str, cwd: Path = ROOT, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m timewheel *args`` to completion."""
    return subprocess.run(
        [sys.executable, "-m", "timewheel", *args],
        cwd=cwd,
        env=env or _env(),
        capture_output=True,
        text=True,
        timeout=GUARD,
        check=False,
    )


def assert_one_line_error(proc: subprocess.CompletedProcess[str], status: int, *words: str) -> None:
    err = proc.stderr
    assert proc.returncode == status, (proc.returncode, proc.stdout, err)
    assert "Traceback" not in err, err
    assert err.endswith("\n"), err
    assert err.count("\n") == 1, err
    for w in words:
        assert w in err, err


def make_store(path: Path) -> None:
    """A small store: nothing running, so nothing is created or changed by opening it later."""
    SQLiteStore(path).close()


# -- help, version, no subcommand ------------------------------------------------------------------
def test_help_without_a_command() -> None:
    out = io.StringIO()
    assert main([], out=out) == 2
    assert "demo" in out.getvalue()


def test_bare_command_prints_help_and_exits_2() -> None:
    proc = run()
    assert proc.returncode == 2
    assert "usage: timewheel" in proc.stdout
    assert "worker" in proc.stdout
    assert "inspect" in proc.stdout


def test_version_names_the_installed_distribution_or_the_source_tree() -> None:
    proc = run("--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("timewheel ")
    assert tw.__version__ in proc.stdout


def test_help_shows_defaults_and_required_options() -> None:
    inspect = run("inspect", "--help").stdout
    assert "(default: 3600.0)" in inspect
    assert "required arguments:\n  --store URL" in inspect
    assert "usage: timewheel inspect [-h] --store URL" in inspect  # not bracketed: required
    worker = run("worker", "--help").stdout
    assert "(default: 30.0)" in worker  # --grace
    assert "(default: 8)" in worker  # --concurrency
    assert "required unless" in worker
    assert "@timewheel.worker_factory" in worker
    demo = run("demo", "--help").stdout
    assert "(default: 3000)" in demo
    assert "--quick" in demo


# -- user errors: one line, no traceback, 2 for the command line, 1 at run time -------------------
@pytest.mark.parametrize(
    ("args", "status", "words"),
    [
        (["inspect", "--store", "foo://x"], 2, ["unknown store scheme 'foo'"]),
        (["inspect", "--store", "tasks.db"], 2, ["has no scheme"]),
        (["inspect", "--store", "sqlite:///x.db?colour=red"], 2, ["unknown option 'colour'"]),
        (["inspect", "--store", "sqlite:///nodir/x.db"], 1, ["does not exist", "nodir"]),
        (["inspect", "--store", "sqlite:///x.db", "--horizon", "-5"], 2, ["--horizon", "above 0"]),
        (["inspect", "--store", "sqlite:///x.db", "--horizon", "nan"], 2, ["finite"]),
        (["inspect", "--store", "sqlite:///x.db", "--bucket", "0"], 2, ["--bucket", "above 0"]),
        (["inspect", "--store", "sqlite:///x.db", "--bucket", "0.01"], 2, ["wider buckets"]),
        (["inspect", "--store", "sqlite:///x.db", "--failures", "-1"], 2, ["--failures"]),
        (["inspect"], 2, ["--store"]),
        (["demo", "--tasks", "-5"], 2, ["--tasks", "0 or more"]),
        (["demo", "--workers", "0"], 2, ["--workers", "1 or more"]),
        (["demo", "--seconds", "0"], 2, ["--seconds"]),
        (["worker", "tests.apps.cli_app:jobs", "--concurrency", "0"], 2, ["--concurrency"]),
        (["worker", "tests.apps.cli_app:jobs", "--grace", "-1"], 2, ["--grace"]),
        (["worker", "tests.apps.cli_app:jobs", "--queues", "a,,b"], 2, ["empty queue name"]),
        (["worker", "tests.apps.cli_app:jobs"], 2, ["--store URL is required"]),
        (["worker", "tests.apps.cli_app:jobs", "--store", "memory://"], 2, ["not shared"]),
        (["worker", "no_such_module_here", "--store", "sqlite:///x.db"], 2, ["no module named"]),
        (["worker", "tests.apps.cli_app:nope", "--store", "sqlite:///x.db"], 2, ["no attribute"]),
        (["worker", "tests.apps.cli_app:", "--store", "sqlite:///x.db"], 2, ["MODULE:ATTR"]),
        (["frobnicate"], 2, ["invalid choice"]),
    ],
)
def test_user_errors_are_one_line(
    tmp_path: Path, args: list[str], status: int, words: list[str]
) -> None:
    make_store(tmp_path / "x.db")
    proc = run(*args, cwd=tmp_path)
    assert_one_line_error(proc, status, *words)


def test_a_missing_store_is_never_created(tmp_path: Path) -> None:
    proc = run("inspect", "--store", "sqlite:///missing.db", cwd=tmp_path)
    assert_one_line_error(proc, 1, "no store at", "missing.db")
    proc = run("worker", "tests.apps.cli_app:jobs", "--store", "sqlite:///missing.db", cwd=tmp_path)
    assert_one_line_error(proc, 1, "no store at", "--create")
    assert list(tmp_path.iterdir()) == []


def test_worker_create_starts_an_empty_store_on_purpose(tmp_path: Path) -> None:
    worker = Worker(tmp_path, "tests.apps.cli_app:jobs", "--store", "sqlite:///new.db", "--create")
    worker.expect("Ctrl-C or SIGTERM to stop")
    assert (tmp_path / "new.db").exists()
    worker.proc.send_signal(signal.SIGTERM)
    assert worker.finish() == 0


def test_worker_signals_wake_the_main_thread_without_a_lock() -> None:
    """The worker's signal handling takes no lock in the handler (a handler runs on the main
    thread, maybe while it holds that lock): a signal wakes ``_Signals.wait`` through the
    wakeup descriptor, and the forced exit's listing of running tasks gives up rather than wait
    on the tracker's lock."""
    from timewheel.cli.worker import _Signals, _Tracker

    signals = _Signals()
    previous = signal.signal(signal.SIGUSR1, lambda n, f: signals.received.append(n))
    try:
        assert not signals.wait(0.01)
        timer = threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGUSR1))
        timer.start()
        assert signals.wait(GUARD)
        assert signals.received == [signal.SIGUSR1]
        timer.join()
    finally:
        signal.signal(signal.SIGUSR1, previous)
        signals.close()
    tracker = _Tracker()
    assert tracker.snapshot_if_free() == []
    with tracker.lock:
        assert tracker.snapshot_if_free() is None


def test_damaged_and_foreign_files_are_refused_untouched(tmp_path: Path) -> None:
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"this is not a database\n" * 10)
    before = bad.read_bytes()
    assert_one_line_error(
        run("inspect", "--store", f"sqlite:///{bad}"), 1, "not an SQLite database"
    )
    proc = run("worker", "tests.apps.cli_app:jobs", "--store", f"sqlite:///{bad}")
    assert_one_line_error(proc, 1, "not an SQLite database")
    assert bad.read_bytes() == before


def test_worker_refuses_a_read_only_store(tmp_path: Path) -> None:
    db = tmp_path / "ro.db"
    make_store(db)
    db.chmod(0o444)
    proc = run("worker", "tests.apps.cli_app:jobs", "--store", f"sqlite:///{db}")
    assert_one_line_error(proc, 1, "read-only")


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory holding a store with one pending task, then made read-only (file and dir)."""
    d = tmp_path / "ro"
    d.mkdir()
    with tw.Scheduler(
        store=SQLiteStore(d / "tasks.db"), dispatcher=tw.NullDispatcher(), allow=["tests.apps"]
    ) as s:
        s.schedule(plain, 1, delay=3600, id="later")
    s.store.close()
    (d / "tasks.db").chmod(0o444)
    d.chmod(0o555)
    yield d
    d.chmod(0o755)


def test_inspect_reads_a_store_it_cannot_write(read_only_dir: Path) -> None:
    db = read_only_dir / "tasks.db"
    before = _sha(db)
    proc = run("inspect", "--store", f"sqlite:///{db}")
    assert proc.returncode == 0, proc.stderr
    assert "opened read-only" in proc.stdout
    assert "pending          1" in proc.stdout
    assert _sha(db) == before
    assert sorted(p.name for p in read_only_dir.iterdir()) == ["tasks.db"]


def test_a_closed_pipe_ends_inspect_quietly(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    make_store(db)
    # 10,000 buckets of JSON: far more than a pipe holds, so the write meets the closed pipe
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "timewheel",
            "inspect",
            "--store",
            f"sqlite:///{db}",
            "--json",
            "--horizon",
            "600000",
            "--bucket",
            "60",
        ],
        cwd=ROOT,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    assert proc.stderr is not None
    assert proc.stdout.readline() == b"{\n"
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert proc.wait(timeout=GUARD) == 1
    assert err == ""


# -- worker targets --------------------------------------------------------------------------------
def test_a_task_function_as_target_is_refused_and_never_called(tmp_path: Path) -> None:
    make_store(tmp_path / "x.db")
    proc = run(
        "worker",
        "tests.apps.cli_app:plain",
        "--store",
        "sqlite:///x.db",
        cwd=tmp_path,
        env=_env(**{SIGNAL_DIR_ENV: str(tmp_path)}),
    )
    assert_one_line_error(proc, 2, "the function plain", "not a Registry", "worker_factory")
    assert not (tmp_path / "plain-was-called").exists()


def test_a_factory_must_return_a_registry_or_a_scheduler(tmp_path: Path) -> None:
    make_store(tmp_path / "x.db")
    proc = run(
        "worker", "tests.apps.cli_app:make_nothing", "--store", "sqlite:///x.db", cwd=tmp_path
    )
    assert_one_line_error(proc, 2, "returned a int", "Registry")


def test_worker_refuses_a_memory_store_in_process() -> None:
    with pytest.raises(SystemExit, match="not shared between processes") as caught:
        main(["worker", "tests.apps.worker_app", "--store", "memory://"])
    assert caught.value.code == 2


# -- a worker process ------------------------------------------------------------------------------
class Worker:
    """``timewheel worker`` in a subprocess, its output read line by line in a thread."""

    def __init__(self, cwd: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "timewheel", "worker", *args],
            cwd=cwd,
            env=env or _env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        self.err = ""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def expect(self, text: str) -> str:
        """The first line (from now on) containing *text*."""
        deadline = time.monotonic() + GUARD
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.proc.kill()
                raise AssertionError(f"no line with {text!r}; saw {self.seen}") from None
            self.seen.append(line)
            if text in line:
                return line

    def finish(self) -> int:
        """Wait for the exit (killing the process past the guard); the exit status."""
        assert self.proc.stderr is not None
        try:
            rc = self.proc.wait(timeout=GUARD)
        finally:
            self.proc.kill()
        if self.proc.stderr.closed:
            return rc
        self._reader.join(GUARD)
        self.err = self.proc.stderr.read()
        self.proc.stderr.close()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        while not self.lines.empty():
            self.seen.append(self.lines.get())
        return rc


def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + GUARD
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


@pytest.fixture
def held(tmp_path: Path) -> Iterator[tuple[Path, Worker]]:
    """A worker process running one task (``hold("t1")``) that waits for its release file."""
    db = tmp_path / "tasks.db"
    with tw.Scheduler(
        store=SQLiteStore(db), dispatcher=tw.NullDispatcher(), allow=["tests.apps"]
    ) as s:
        s.schedule(hold, "t1", delay=0, id="t1")
    s.store.close()
    env = _env(**{SIGNAL_DIR_ENV: str(tmp_path)})
    worker = Worker(ROOT, "tests.apps.cli_app:jobs", "--store", f"sqlite:///{db}", env=env)
    worker.expect("Ctrl-C or SIGTERM to stop")
    _wait_for(tmp_path / "t1.started")
    yield tmp_path, worker
    worker.proc.kill()
    worker.finish()


@pytest.mark.realclock
def test_first_signal_waits_for_running_tasks(held: tuple[Path, Worker]) -> None:
    where, worker = held
    worker.proc.send_signal(signal.SIGTERM)
    line = worker.expect("stopping")
    assert "waiting up to 30 s for 1 running task(s): t1 (tests.apps.cli_app:hold, running" in line
    assert "Ctrl-C again to exit at once" in line
    (where / "t1.release").touch()
    assert worker.finish() == 0, worker.err
    assert any("timewheel worker: stopped" in s for s in worker.seen), worker.seen
    assert (where / "t1.finished").exists()
    with SQLiteStore(where / "tasks.db") as store:
        assert store.get("t1").state is tw.TaskState.SUCCEEDED


@pytest.mark.realclock
def test_second_signal_exits_at_once(held: tuple[Path, Worker]) -> None:
    where, worker = held
    worker.proc.send_signal(signal.SIGINT)
    worker.expect("stopping")
    worker.proc.send_signal(signal.SIGINT)
    assert worker.finish() == 128 + signal.SIGINT
    assert "forced exit" in worker.err
    assert "t1 (tests.apps.cli_app:hold" in worker.err
    assert "run again once it expires" in worker.err
    assert "Traceback" not in worker.err
    assert not (where / "t1.finished").exists()
    with SQLiteStore(where / "tasks.db") as store:
        assert store.get("t1").state is tw.TaskState.RUNNING  # until its lease expires


@pytest.mark.realclock
def test_the_grace_period_releases_what_still_runs(tmp_path: Path) -> None:
    db = tmp_path / "tasks.db"
    with tw.Scheduler(
        store=SQLiteStore(db), dispatcher=tw.NullDispatcher(), allow=["tests.apps"]
    ) as s:
        s.schedule(hold, "t2", delay=0, id="t2")
    s.store.close()
    env = _env(**{SIGNAL_DIR_ENV: str(tmp_path)})
    args = ("tests.apps.cli_app:make_registry", "--store", f"sqlite:///{db}", "--grace", "0.2")
    worker = Worker(ROOT, *args, env=env)
    try:
        _wait_for(tmp_path / "t2.started")
        worker.proc.send_signal(signal.SIGTERM)
        assert "waiting up to 0.2 s" in worker.expect("stopping")
        assert "released to READY" in worker.expect("stopped")
        assert worker.finish() == 0, worker.err
    finally:
        (tmp_path / "t2.release").touch()
        worker.proc.kill()
        worker.finish()
    with SQLiteStore(db) as store:
        assert store.get("t2").state is tw.TaskState.READY


# -- inspect and the worker's report ---------------------------------------------------------------
def elsewhere() -> None:
    """Registered by name in this process only: other processes cannot resolve it."""


@pytest.fixture
def busy_store(tmp_path: Path) -> Path:
    """A store with a failure, READY tasks no other process can resolve, an overdue PENDING task,
    an overdue recurring instance and a herd due in half an hour."""
    db = tmp_path / "busy.db"
    now = time.time()
    refs.register_task("cli-test-elsewhere", elsewhere)
    try:
        clock = FakeClock(start=now - 3600)
        store = SQLiteStore(db)
        sched = tw.Scheduler(
            store=store,
            clock=clock,
            dispatcher=tw.InlineDispatcher(queues=["default"]),
            allow=["tests.apps"],
        )
        with sched:
            sched.schedule(fail, "boom", delay=0, id="bad")
            for i in range(3):
                sched.schedule("cli-test-elsewhere", delay=0, queue="other", id=f"away{i}")
            clock.advance(1)
            sched.schedule(plain, 1, delay=100, id="late")
            sched.schedule(plain, 2, every=600, id="sweep")
            for i in range(150):
                sched.schedule(plain, i, at=now + 1830, id=f"herd{i}")
        store.close()
    finally:
        refs.unregister("cli-test-elsewhere")
    return db


def test_inspect_shows_what_an_operator_needs(busy_store: Path) -> None:
    proc = run("inspect", "--store", f"sqlite:///{busy_store}")
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert "overdue: 2 PENDING tasks past due" in text  # "late" and the recurring instance
    assert "3 READY waiting for a worker" in text
    assert "3 READY cli-test-elsewhere" in text
    assert "cannot be imported here" in text
    assert "missed: schedule 'sweep'" in text
    assert "latest failures (1):" in text
    assert "RuntimeError: boom" in text
    assert "herd warning: 150 tasks due" in text


def test_inspect_json_for_scripts(busy_store: Path) -> None:
    proc = run("inspect", "--store", f"sqlite:///{busy_store}", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["counts"]["ready"] == 3
    assert data["overdue_pending"]["count"] == 2
    (away,) = data["ready"]["by_function"]
    assert away["function"] == "cli-test-elsewhere"
    assert away["count"] == 3
    assert away["import_problem"]
    (missed,) = data["missed_slots"]
    assert missed["schedule"] == "sweep"
    assert missed["missed"] >= 5
    assert data["load"]["peak"] == 150
    assert data["load"]["herd"]["count"] == 150
    assert [f["id"] for f in data["failures"]] == ["bad"]
    assert "RuntimeError: boom" in data["failures"][0]["error"]


def test_inspect_without_imports(busy_store: Path) -> None:
    proc = run("inspect", "--store", f"sqlite:///{busy_store}", "--json", "--no-imports")
    (away,) = json.loads(proc.stdout)["ready"]["by_function"]
    assert away["import_problem"] is None


@pytest.mark.realclock
def test_worker_report_shows_tasks_it_cannot_claim(busy_store: Path) -> None:
    worker = Worker(
        ROOT, "tests.apps.cli_app:jobs", "--store", f"sqlite:///{busy_store}", "--report", "0.2"
    )
    try:
        line = worker.expect("this worker:")
        assert "3 ready" in line
        line = worker.expect("cannot import")
        assert "3 READY tasks call cli-test-elsewhere" in line
        worker.proc.send_signal(signal.SIGTERM)
        assert worker.finish() == 0, worker.err
    finally:
        worker.proc.kill()
        worker.finish()


# -- demo -------------------------------------------------------------------------------------------
@pytest.mark.realclock
def test_demo_runs_end_to_end_small() -> None:
    out = io.StringIO()
    rc = main(
        ["demo", "--tasks", "300", "--seconds", "1", "--workers", "4", "--burst", "500"], out=out
    )
    text = out.getvalue()
    assert rc == 0, text
    assert "flaky task: 'charged on attempt 3'" in text
    assert "stuck task: timed_out" in text
    assert "801 succeeded" in text
    assert "burst: 500 tasks due at once" in text
    assert "lateness of the spread tasks p50" in text


@pytest.mark.realclock
def test_demo_quick_in_a_subprocess() -> None:
    proc = run("demo", "--quick")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "300 one-shot tasks" in proc.stdout
    assert "1301 succeeded" in proc.stdout
