"""The allowlist of stored function references: what a worker imports and calls from text that
anyone able to write the store could have put there.

Rows are written straight into the SQLite file with SQL (bypassing ``schedule()``), as an
attacker with write access to the store would: ``os:system`` with a shell command, and a reference
to ``tests.untrusted``, a module that creates a marker file when it is imported. No worker may run
or import either; allowed modules and registered names keep running.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

import timewheel as tw
from tests.apps import allowed_jobs
from tests.apps.allowed_jobs import add
from tests.conftest import GUARD, wait_for
from timewheel import refs
from timewheel.cli import main
from timewheel.delayqueue import ITEM_FUNC
from timewheel.errors import InvalidScheduleError, InvalidTypeError
from timewheel.refs import Allowlist, ReferenceNotAllowedError, UnresolvableRefError
from timewheel.stores import MemoryStore
from timewheel.stores.sqlite import SQLiteStore
from timewheel.task import Task
from timewheel.testing import FakeClock

ROOT = Path(__file__).resolve().parent.parent
S = tw.TaskState
JOBS = "tests.apps.allowed_jobs"
UNTRUSTED = "tests.untrusted"
START = datetime(2026, 5, 1, tzinfo=timezone.utc)


@pytest.fixture
def marker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The file ``tests.untrusted`` creates if anything imports it; checked absent at the end."""
    assert UNTRUSTED not in sys.modules, "an earlier test imported the untrusted module"
    path = tmp_path / "imported.marker"
    monkeypatch.setenv("TIMEWHEEL_TEST_MARKER", str(path))
    yield path
    assert not path.exists(), "the untrusted module was imported"
    assert UNTRUSTED not in sys.modules, "the untrusted module was imported"


@pytest.fixture(autouse=True)
def clean_registry() -> Iterator[None]:
    before = refs.registered()
    yield
    for name in set(refs.registered()) - set(before):
        refs.unregister(name)


def write_row(
    db: Path,
    task_id: str,
    func: str,
    args: list[Any],
    *,
    due: float,
    state: str = "pending",
    queue: str = "default",
    retry: str | None = None,
) -> None:
    """Insert a task row with plain SQL, as anyone who can write the file can."""
    us = round(due * 1e6)
    with sqlite3.connect(db) as conn:
        conn.execute(
            "INSERT INTO tasks (id, func, args, kwargs, due, state, version, attempts, retry, "
            "priority, queue, created, updated) VALUES (?, ?, ?, '{}', ?, ?, 1, 0, ?, 0, ?, ?, ?)",
            (task_id, func, json.dumps(args), us, state, retry, queue, us, us),
        )
    conn.close()


# -- the policy, on the text and on the object found ---------------------------------------------
@pytest.mark.parametrize(
    ("allowed", "ref", "permitted"),
    [
        (["myapp.jobs"], "myapp.jobs:f", True),
        (["myapp.jobs"], "myapp.jobs.mail:f", True),
        (["myapp.jobs"], "myapp.jobsx:f", False),
        (["myapp.jobs"], "myapp:f", False),
        (["myapp"], "myapp.jobs.mail:Class.method", True),
        ([], "myapp.jobs:f", False),
        ([], "not-registered-anywhere", True),  # a name: unresolvable where not registered
    ],
)
def test_modules_match_on_dotted_boundaries(allowed: list[str], ref: str, permitted: bool) -> None:
    assert Allowlist(allowed).permits(ref) is permitted


@pytest.mark.parametrize(
    "ref",
    [
        f"{JOBS}.__builtins__:eval",  # a special name in the module path
        f"{JOBS}:__builtins__",
        f"{JOBS}:os.system",  # a module the allowed module imported
        f"{JOBS}:subprocess.run",
        f"{JOBS}:system",  # `from os import system`: found there, defined in posix
        f"{JOBS}:Jobs.shell",  # a foreign function kept on an allowed class
        f"{JOBS}:registry.every",  # a method of an instance of a foreign class
        f"{JOBS}:_hidden",  # private
        f"{JOBS}:Jobs.__init__",
        f"{JOBS}:add.__globals__",
        f"{JOBS}:add.__code__",
        f"{JOBS}:Jobs.__subclasses__",
        f"{JOBS}:add()",
        f"{JOBS}x:add",
        f"{UNTRUSTED}:run",
        "os:system",
        "subprocess:run",
        "builtins:eval",
    ],
)
def test_references_that_leave_the_allowed_module_are_refused(ref: str, marker: Path) -> None:
    allowlist = Allowlist([JOBS])
    with pytest.raises(ReferenceNotAllowedError) as info:
        allowlist.resolve(ref)
    assert info.value.ref == ref
    assert repr(ref) in str(info.value)
    assert "not allowed to run" in str(info.value)
    assert isinstance(info.value, UnresolvableRefError)
    assert isinstance(info.value, tw.SerializationError)


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        (f"{JOBS}:add", add),
        (f"{JOBS}:Jobs.double", allowed_jobs.Jobs.double),
        (f"{JOBS}:Jobs.name", allowed_jobs.Jobs.name),
        (f"{JOBS}:Jobs", allowed_jobs.Jobs),
    ],
)
def test_objects_defined_in_an_allowed_module_resolve(ref: str, expected: object) -> None:
    assert Allowlist(["tests.apps"]).resolve(ref) == expected


def test_refusal_before_the_import_names_the_setting(marker: Path) -> None:
    with pytest.raises(ReferenceNotAllowedError) as info:
        Allowlist(["myapp.jobs"]).resolve(f"{UNTRUSTED}:run")
    text = str(info.value)
    assert "it was not imported" in text
    assert f"Scheduler(allow=[{UNTRUSTED!r}])" in text
    assert f"timewheel worker --allow {UNTRUSTED}" in text
    assert "myapp.jobs" in text  # what the allowlist holds


def test_refusal_after_the_import_says_what_was_found() -> None:
    with pytest.raises(ReferenceNotAllowedError) as info:
        Allowlist([JOBS]).resolve(f"{JOBS}:system")
    text = str(info.value)
    assert "defined in 'posix'" in text or "defined in 'nt'" in text
    assert "it was not called" in text
    assert "not what it imports" in text


def test_registered_names_always_run() -> None:
    refs.register_task("allowlist-double", allowed_jobs.Jobs.double)
    refs.register_task("os:looks-like-a-path", add)  # a name wins over the import path form
    for allowlist in (Allowlist(), Allowlist(["myapp"])):
        assert allowlist.resolve("allowlist-double") is allowed_jobs.Jobs.double
        assert allowlist.resolve("os:looks-like-a-path") is add
        assert allowlist.permits("os:looks-like-a-path")
    with pytest.raises(UnresolvableRefError, match="neither a registered task name") as info:
        Allowlist().resolve("no-such-name")
    assert not isinstance(info.value, ReferenceNotAllowedError)  # another worker may know it


def test_an_allowed_module_that_does_not_import_is_unresolvable_not_refused() -> None:
    with pytest.raises(UnresolvableRefError, match="cannot be imported") as info:
        Allowlist(["tests.apps"]).resolve("tests.apps.no_such_module:f")
    assert not isinstance(info.value, ReferenceNotAllowedError)


def test_the_allowlist_checks_its_names() -> None:
    with pytest.raises(InvalidTypeError, match=r"got the str 'myapp'\); pass \['myapp'\]"):
        Allowlist("myapp")
    for bad in ("", "my-app", "myapp..jobs", ".myapp", "myapp.__main__", "myapp:jobs"):
        with pytest.raises(InvalidScheduleError, match="module or package names"):
            Allowlist([bad])
    with pytest.raises(InvalidTypeError):
        Allowlist([3])  # type: ignore[list-item]  # deliberately wrong
    assert Allowlist(["a.b", "a", "a", "c"]).modules == ("a", "c")
    assert Allowlist(["a.b"]) == Allowlist(["a.b", "a.b.c"])
    assert hash(Allowlist(["x"])) == hash(Allowlist(["x"]))
    assert repr(Allowlist(["x", "y"])) == "Allowlist(['x', 'y'])"
    assert repr(Allowlist.everything()) == "Allowlist.everything()"
    assert Allowlist(["a"]).extended(["b"]).modules == ("a", "b")
    assert Allowlist.everything().extended(["b"]).unrestricted


def test_everything_runs_any_reference() -> None:
    assert Allowlist.everything().resolve("os:getcwd") is os.getcwd
    assert Allowlist.everything().permits(f"{JOBS}:_hidden")


def test_stored_text_never_imports_a_module_no_allowlist_allows(marker: Path) -> None:
    # resolve_ref and import_path apply no allowlist, but they import only what one allows
    with pytest.raises(ReferenceNotAllowedError, match="it was not imported"):
        refs.resolve_ref(f"{UNTRUSTED}:run")
    with pytest.raises(ReferenceNotAllowedError):
        refs.import_path(f"{UNTRUSTED}:Boom")
    with pytest.raises(ReferenceNotAllowedError, match="special name"):
        refs.import_path("tests.__main__:f")
    assert refs.import_path("builtins:ValueError") is ValueError  # imported already: harmless
    assert UNTRUSTED not in refs.permitted_imports()


def test_reference_problem_is_the_rules_every_allowlist_applies() -> None:
    assert refs.reference_problem("myapp:f") is None
    assert refs.reference_problem("a-name") is None
    assert "special name" in (refs.reference_problem("myapp.__init__:f") or "")
    assert "'_private'" in (refs.reference_problem("myapp:_private") or "")
    assert "dotted path" in (refs.reference_problem("myapp:f()") or "")


# -- schedule() refuses what the scheduler would not run ------------------------------------------
def test_schedule_into_a_durable_store_needs_the_module_allowed(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "t.db")
    sched = tw.Scheduler(store=store, clock=FakeClock(START), dispatcher=tw.InlineDispatcher())
    with pytest.raises(ReferenceNotAllowedError) as info:
        sched.schedule(add, 1, 2, delay=10)
    text = str(info.value)
    assert f"cannot schedule '{JOBS}:add' into a durable store" in text
    assert f"Scheduler(allow=[{JOBS!r}])" in text
    assert "registered names only" in text
    for call in (
        lambda: sched.schedule(add, 1, 2, every=60),
        lambda: sched.schedule(add, 1, 2, cron="* * * * *"),
        lambda: sched.schedule("os:system", "true", delay=10),
        lambda: sched.schedule(os.getcwd, delay=10),
    ):
        with pytest.raises(ReferenceNotAllowedError):
            call()
    refs.register_task("allowlist-add", add)
    sched.schedule("allowlist-add", 1, 2, delay=10)  # a registered name needs no allow=
    sched.schedule(add, 1, 2, delay=10)  # now registered: stored under its name
    assert store.count_by_state() == {S.PENDING: 2}
    store.close()


def test_schedule_with_allow_stores_import_paths(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "t.db")
    clock = FakeClock(START)
    sched = tw.Scheduler(
        store=store, clock=clock, dispatcher=tw.InlineDispatcher(), allow=["tests.apps"]
    )
    with sched:
        job = sched.schedule(add, 1, 2, delay=10)
        sched.schedule(allowed_jobs.Jobs.double, 4, every=60, id="doubling")
        with pytest.raises(ReferenceNotAllowedError, match="not what it imports"):
            sched.schedule(f"{JOBS}:os.system", "true", delay=10)
        with pytest.raises(ReferenceNotAllowedError, match="outside the allowlist"):
            sched.schedule(os.getcwd, delay=10)
        clock.advance(60)
        assert job.result(timeout=0) == 3
        assert store.get(job.id).func == f"{JOBS}:add"
    store.close()


def test_the_memory_store_keeps_accepting_any_callable() -> None:
    clock = FakeClock(START)
    with tw.Scheduler(clock=clock, dispatcher=tw.InlineDispatcher()) as sched:
        jobs = [
            sched.schedule(os.getcwd, delay=1),
            sched.schedule(lambda: "lambda", delay=1),
            sched.schedule("os:getcwd", delay=1),  # text given in this process
        ]
        clock.advance(1)
        assert [j.result(timeout=0) for j in jobs] == [os.getcwd(), "lambda", os.getcwd()]


def test_an_explicit_allowlist_applies_to_text_on_the_memory_store(marker: Path) -> None:
    clock = FakeClock(START)
    store = MemoryStore()
    sched = tw.Scheduler(
        store=store, clock=clock, dispatcher=tw.InlineDispatcher(), allow=["tests.apps"]
    )
    with sched:
        assert sched.schedule(os.getcwd, delay=1)  # a callable: nothing is resolved from text
        with pytest.raises(ReferenceNotAllowedError):
            sched.schedule("os:getcwd", delay=1)
        # a string that reached the store without schedule() is refused by the worker
        now = clock.time()
        sneaky = Task(id="sneaky", func=f"{UNTRUSTED}:run", due=now, created=now, updated=now)
        sched.runtime.submit(sneaky, "error")
        clock.advance(1)
        assert store.get("sneaky").state is S.FAILED


# -- workers: rows written with SQL ---------------------------------------------------------------
def _attack(db: Path, tmp_path: Path, due: float) -> Path:
    """The rows an attacker writes; returns the file `os:system` would create."""
    pwned = tmp_path / "pwned"
    write_row(db, "shell", "os:system", [f"touch {pwned}"], due=due)
    write_row(db, "import", f"{UNTRUSTED}:run", [], due=due)
    write_row(db, "trick", f"{JOBS}:os.system", [f"touch {pwned}"], due=due)
    write_row(db, "dunder", f"{JOBS}.__builtins__:eval", ["1"], due=due)
    return pwned


def _assert_refused(store: SQLiteStore, caplog: pytest.LogCaptureFixture, pwned: Path) -> None:
    assert not pwned.exists(), "os.system ran"
    for task_id, ref in [
        ("shell", "os:system"),
        ("import", f"{UNTRUSTED}:run"),
        ("trick", f"{JOBS}:os.system"),
        ("dunder", f"{JOBS}.__builtins__:eval"),
    ]:
        task = store.get(task_id)
        assert task.state is S.FAILED, (task_id, task.state, task.error)
        assert task.attempts == 1
        assert "ReferenceNotAllowedError" in (task.error or "")
        assert f"function reference {ref!r} is not allowed to run" in (task.error or "")
        lines = [
            r
            for r in caplog.records
            if r.levelno == logging.ERROR
            and r.name == "timewheel.dispatch"
            and getattr(r, "task_id", None) == task_id
        ]
        assert len(lines) == 1, (task_id, [r.getMessage() for r in lines])
        assert ref in lines[0].getMessage()


def test_an_inline_worker_fails_refused_rows_without_importing_them(
    tmp_path: Path, marker: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "t.db"
    store = SQLiteStore(db)
    clock = FakeClock(START)
    pwned = _attack(db, tmp_path, due=clock.time() + 5)
    refs.register_task("allowlist-double", allowed_jobs.Jobs.double)
    sched = tw.Scheduler(store=store, clock=clock, dispatcher=tw.InlineDispatcher(), allow=[JOBS])
    with caplog.at_level(logging.ERROR), sched:
        allowed = sched.schedule(add, 2, 3, delay=5)
        named = sched.schedule("allowlist-double", 21, delay=5)
        clock.advance(5)
        assert allowed.result(timeout=0) == 5
        assert named.result(timeout=0) == 42
        _assert_refused(store, caplog, pwned)
        with pytest.raises(tw.TaskFailedError, match="not allowed to run"):
            sched.get("shell").result(timeout=0)
    store.close()


@pytest.mark.realclock
def test_a_thread_pool_worker_fails_refused_rows_without_importing_them(
    tmp_path: Path, marker: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "t.db"
    store = SQLiteStore(db)
    pwned = _attack(db, tmp_path, due=time.time())
    # written READY too, as if a trigger elsewhere had promoted them: the batched claim path
    write_row(db, "ready", "os:system", [f"touch {pwned}"], due=time.time(), state="ready")
    refs.register_task("allowlist-double", allowed_jobs.Jobs.double)
    sched = tw.Scheduler(
        store=store, dispatcher=tw.ThreadPoolDispatcher(workers=2), allow=[JOBS], poll_interval=0.05
    )
    with caplog.at_level(logging.ERROR), sched:
        allowed = sched.schedule(add, 2, 3, delay=0)
        named = sched.schedule("allowlist-double", 21, delay=0)
        assert allowed.result(timeout=GUARD) == 5
        assert named.result(timeout=GUARD) == 42
        ids = ("shell", "import", "trick", "dunder", "ready")
        wait_for(lambda: all(store.get(i).state is S.FAILED for i in ids), "the refusals")
    _assert_refused(store, caplog, pwned)
    assert store.get("ready").state is S.FAILED
    assert store.unresolvable() == {}, "refused references are failed, not left READY"
    store.close()


def test_a_refused_reference_is_not_retried(tmp_path: Path, marker: Path) -> None:
    db = tmp_path / "t.db"
    store = SQLiteStore(db)
    clock = FakeClock(START)
    retry = json.dumps(
        {
            "max_attempts": 5,
            "backoff": "fixed",
            "delay": 1,
            "cap": 60,
            "jitter": 0,
            "retry_on": ["builtins:Exception"],
        }
    )
    write_row(db, "again", f"{UNTRUSTED}:run", [], due=clock.time(), retry=retry)
    with tw.Scheduler(store=store, clock=clock, dispatcher=tw.InlineDispatcher()):
        clock.advance(1)
        assert store.get("again").retry.max_attempts == 5
        assert store.get("again").state is S.FAILED
        assert store.get("again").attempts == 1
    store.close()


def test_a_stored_retry_never_imports_its_exception_types(tmp_path: Path, marker: Path) -> None:
    db = tmp_path / "t.db"
    store = SQLiteStore(db)
    clock = FakeClock(START)
    retry = json.dumps(
        {
            "max_attempts": 2,
            "backoff": "fixed",
            "delay": 1,
            "cap": 60,
            "jitter": 0,
            "retry_on": [f"{UNTRUSTED}:Boom"],
        }
    )
    write_row(db, "typed", f"{JOBS}:add", [1, 2], due=clock.time(), retry=retry)
    task = store.get("typed")
    # kept by name, unimported: it matches an exception whose class is tests.untrusted:Boom
    assert task.retry.retry_on == (f"{UNTRUSTED}:Boom",)
    assert UNTRUSTED not in sys.modules
    store.close()


def test_the_delay_queue_consumer_never_resolves_stored_text(tmp_path: Path, marker: Path) -> None:
    db = tmp_path / "q.db"
    clock = FakeClock(START)
    store = SQLiteStore(db)
    queue: tw.DelayQueue[Any] = tw.DelayQueue(clock=clock, store=store, name="q")
    queue.put({"order": 1}, delay=1)
    queue.shutdown()
    pwned = tmp_path / "pwned"
    now = clock.time()
    write_row(db, "q-shell", "os:system", [f"touch {pwned}"], due=now, queue="q")
    write_row(db, "q-import", f"{UNTRUSTED}:run", [], due=now, queue="q")
    write_row(db, "q-item", ITEM_FUNC, [{"order": 2}], due=now, queue="q")
    again: tw.DelayQueue[Any] = tw.DelayQueue(clock=clock, store=store, name="q")
    clock.advance(1)
    assert sorted(again.get_nowait()["order"] for _ in range(2)) == [1, 2]
    assert again.qsize() == 0
    again.shutdown()
    assert not pwned.exists()
    assert store.get("q-shell").state is S.PENDING  # not the queue's: left alone, never called
    store.close()


# -- the command line ---------------------------------------------------------------------------
def _spawn(db: Path, *extra: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            *(sys.executable, "-m", "timewheel", "worker", "tests.apps.cli_app:jobs"),
            *("--store", f"sqlite:///{db}", "--concurrency", "2", *extra),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def record(path: str, tag: str) -> str:
    """A task outside the worker target's package: it runs only with --allow."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(f"{tag}\n")
    return tag


@pytest.mark.realclock
def test_worker_allow_adds_modules_and_refuses_the_rest(tmp_path: Path, marker: Path) -> None:
    db = tmp_path / "tasks.db"
    out = tmp_path / "out.txt"
    with tw.Scheduler(
        store=SQLiteStore(db), dispatcher=tw.NullDispatcher(), allow=[__name__, "tests.apps"]
    ) as producer:
        producer.schedule(record, str(out), "allowed", delay=0, id="allowed")
        producer.schedule(add, 1, 2, delay=0, id="package")
    producer.store.close()
    pwned = _attack(db, tmp_path, due=time.time())
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TIMEWHEEL_TEST_MARKER": str(marker)}
    worker = _spawn(db, "--allow", f"{__name__},myapp.jobs", "--allow", "myapp.billing", env=env)
    store = SQLiteStore(db)
    try:
        ids = ("allowed", "package", "shell", "import", "trick", "dunder")
        wait_for(lambda: all(store.get(i).state.terminal for i in ids), "every task to end")
    finally:
        worker.send_signal(signal.SIGTERM)
        text = worker.communicate(timeout=GUARD)[0]
    assert worker.returncode == 0, text
    assert (
        "runs registered names and the functions of myapp.billing, myapp.jobs, tests.apps, "
        f"{__name__}" in text
    )
    assert store.get("allowed").state is S.SUCCEEDED
    assert out.read_text() == "allowed\n"
    assert store.get("package").result == 3  # the target's package, tests.apps
    for task_id in ("shell", "import", "trick", "dunder"):
        assert store.get(task_id).state is S.FAILED
        assert "not allowed to run" in (store.get(task_id).error or "")
    assert text.count("no attempt left: timewheel.refs.ReferenceNotAllowedError") == 4, text
    assert not pwned.exists()
    store.close()


@pytest.mark.realclock
def test_worker_without_allow_refuses_modules_outside_its_package(tmp_path: Path) -> None:
    db = tmp_path / "tasks.db"
    out = tmp_path / "out.txt"
    with tw.Scheduler(
        store=SQLiteStore(db), dispatcher=tw.NullDispatcher(), allow=[__name__]
    ) as producer:
        producer.schedule(record, str(out), "elsewhere", delay=0, id="elsewhere")
    producer.store.close()
    worker = _spawn(db, env={**os.environ, "PYTHONPATH": str(ROOT)})
    store = SQLiteStore(db)
    try:
        wait_for(lambda: store.get("elsewhere").state.terminal, "the task to end")
    finally:
        worker.send_signal(signal.SIGTERM)
        text = worker.communicate(timeout=GUARD)[0]
    task = store.get("elsewhere")
    assert task.state is S.FAILED
    assert f"`timewheel worker --allow {__name__}`" in (task.error or "")
    assert "the functions of tests.apps (--allow MODULES adds more)" in text
    assert not out.exists()
    store.close()


@pytest.mark.parametrize("value", ["a,,b", "my-app", "pkg.__main__"])
def test_worker_allow_refuses_bad_module_names(value: str) -> None:
    with pytest.raises(SystemExit) as info:
        main(["worker", "tests.apps.cli_app:jobs", "--store", "sqlite:///x.db", "--allow", value])
    assert info.value.code == 2


def _inspect(db: Path, *extra: str, marker: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TIMEWHEEL_TEST_MARKER": str(marker)}
    proc = subprocess.run(
        [sys.executable, "-m", "timewheel", "inspect", "--store", f"sqlite:///{db}", *extra],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=GUARD,
    )
    assert proc.returncode == 0, proc.stderr
    if "--json" in extra:
        data: dict[str, Any] = json.loads(proc.stdout)
        return data
    return {"text": proc.stdout}


def test_inspect_lists_references_no_worker_runs_apart_from_unimportable_ones(
    tmp_path: Path, marker: Path
) -> None:
    db = tmp_path / "tasks.db"
    SQLiteStore(db).close()
    now = time.time()
    write_row(db, "shell", "os:system", ["touch x"], due=now - 10, state="ready")
    write_row(db, "import", f"{UNTRUSTED}:run", [], due=now - 10, state="ready")
    write_row(db, "dunder", f"{JOBS}.__builtins__:eval", ["1"], due=now - 10, state="ready")
    write_row(db, "gone", "tests.apps.no_such_module:f", [], due=now - 10, state="ready")
    write_row(db, "fine", f"{JOBS}:add", [1, 2], due=now - 10, state="ready")
    write_row(db, "later", f"{JOBS}:_hidden", [], due=now + 600)

    # without --allow: only what every allowlist refuses, and nothing outside it is imported
    data = _inspect(db, "--json", marker=marker)
    assert data["allow"] is None
    refused = {r["function"]: r for r in data["refused"]}
    assert set(refused) == {f"{JOBS}.__builtins__:eval", f"{JOBS}:_hidden"}
    assert refused[f"{JOBS}:_hidden"]["tasks"] == 1
    by_function = {f["function"]: f for f in data["ready"]["by_function"]}
    assert by_function["os:system"]["refused"] is None
    assert by_function[f"{UNTRUSTED}:run"]["import_checked"] is False

    # with the workers' allowlist: refused and unimportable are told apart
    data = _inspect(db, "--json", "--allow", f"{JOBS},tests.apps.no_such_module", marker=marker)
    assert data["allow"] == [JOBS, "tests.apps.no_such_module"]
    refused = {r["function"]: r["reason"] for r in data["refused"]}
    assert set(refused) == {
        "os:system",
        f"{UNTRUSTED}:run",
        f"{JOBS}.__builtins__:eval",
        f"{JOBS}:_hidden",
    }
    assert "outside the allowlist" in refused["os:system"]
    by_function = {f["function"]: f for f in data["ready"]["by_function"]}
    gone = by_function["tests.apps.no_such_module:f"]
    assert gone["refused"] is None
    assert "cannot be imported" in gone["import_problem"]
    assert by_function[f"{JOBS}:add"] == {**by_function[f"{JOBS}:add"], "refused": None}
    assert by_function[f"{JOBS}:add"]["import_problem"] is None
    assert by_function["os:system"]["import_problem"] is None

    text = _inspect(db, "--allow", JOBS, marker=marker)["text"]
    assert "refused function 'os:system': 1 waiting task(s), 0 schedule(s); no worker runs it" in (
        text
    )
    assert f"READY {UNTRUSTED}:run, oldest" in text
    assert "no worker runs it" in text


def test_an_async_scheduler_fails_refused_rows_without_importing_them(
    tmp_path: Path, marker: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "t.db"
    store = SQLiteStore(db)
    clock = FakeClock(START)
    pwned = _attack(db, tmp_path, due=clock.time() + 5)

    async def main() -> None:
        async with tw.AsyncScheduler(store=store, clock=clock, allow=[JOBS]) as sched:
            allowed = await sched.schedule(add, 2, 3, delay=5)
            await clock.advance_async(5)
            assert await allowed.result(timeout=0) == 5
            with pytest.raises(ReferenceNotAllowedError):
                await sched.schedule("os:system", "true", delay=1)

    with caplog.at_level(logging.ERROR):
        asyncio.run(main())
    _assert_refused(store, caplog, pwned)
    store.close()
