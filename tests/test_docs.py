"""Every Python block in README.md and docs/*.md runs, as written, in the test suite.

Each fenced block whose language is ``python`` is one test: it runs in a fresh namespace (named
``__main__``, as a script), in an empty temporary working directory. Blocks in other languages
(``console``, ``text``, ...) are not Python and are not collected.

A block may declare what it assumes in an HTML comment on the lines just before it (invisible
when the Markdown is rendered)::

    <!-- doc-test: needs send_email, order_id -->
    <!-- doc-test: continues -->

* ``needs NAME, ...``: placeholders the prose leaves to the reader (``send_email``, an
  ``order_id``), defined from :data:`HELPERS` before the block runs. ``myapp`` writes a small
  importable package of that name into the working directory (durable stores import functions
  by name).
* ``continues``: the block goes on from the previous Python block of the same page, so the
  earlier blocks run first in the same namespace.

Functions named ``test_*`` that a block defines (a page about testing shows one) are called after
the block ran; an ``async def`` one runs with ``asyncio.run``.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import re
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import timewheel as tw

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

HELPERS: dict[str, str] = {
    "send_email": """
        def send_email(to, *, subject="hello"):
            return f"sent {subject!r} to {to}"
    """,
    "charge": """
        def charge(order_id):
            return f"charged order {order_id}"
    """,
    "order_id": "order_id = 42",
    "fetch_prices": "def fetch_prices():\n    return {'EUR': 1.0}",
    "fetch_rates": "def fetch_rates():\n    return {'USD': 1.1}",
    "build_report": "def build_report():\n    return 'report'",
    "page_someone": "def page_someone():\n    return 'paged'",
    "download": "def download(url):\n    return f'<html>{url}</html>'",
    "parse": "def parse():\n    return ['row']",
    "store_rows": "def store_rows():\n    return 1",
    "url": "url = 'https://example.com/prices.csv'",
    "nightly_report": "def nightly_report():\n    return 'report'",
    "refresh_cache": "def refresh_cache():\n    return 'fresh'",
    "sync": "def sync():\n    return 'synced'",
}
"""Placeholder definitions a block can ask for with ``<!-- doc-test: needs NAME -->``."""

MYAPP = {
    "myapp/__init__.py": '"""An example application for the documentation\'s examples."""\n',
    "myapp/billing.py": "def charge(order_id):\n    return f'charged order {order_id}'\n",
    "myapp/jobs.py": (
        "import timewheel as tw\n\nregistry = tw.Registry()\n\n\n"
        "@registry.every(minutes=5)\ndef refresh_cache():\n    return 'fresh'\n"
    ),
}
"""The files of the ``myapp`` package (``<!-- doc-test: needs myapp -->``)."""

PAGE_NEEDS: dict[str, tuple[str, ...]] = {
    "docs/recurring.md": ("nightly_report", "refresh_cache", "sync"),
}
"""Placeholders every block of a page may use, for pages without ``doc-test`` comments."""

XFAIL: dict[tuple[str, str], str] = {
    ("docs/wheel.md", "from timewheel.wheel import TimingWheel"): "being fixed",
    (
        "docs/recurring.md",
        '@sched.cron("0 0 * * *", tz="Europe/Berlin", misfire=tw.Misfire.RUN_ONCE)',
    ): ("being fixed"),
    ("docs/recurring.md", "# myapp/jobs.py"): "being fixed",
}
"""(page, first line of the block) -> reason, for blocks on pages whose code is being reworked
(non-strict: a block that starts to pass is reported, not failed)."""

_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<lang>[\w+-]*)[^\n]*$")
_DIRECTIVE = re.compile(r"^<!--\s*doc-test:\s*(?P<body>.*?)\s*-->$")


@dataclass(frozen=True)
class Block:
    """One Python block of a page."""

    page: str  # relative to the repository root
    line: int  # of the opening fence, 1-based
    code: str
    needs: tuple[str, ...] = ()
    continues: bool = False

    def __str__(self) -> str:
        return f"{self.page}:{self.line}"


def _directives(lines: list[str], fence: int) -> tuple[tuple[str, ...], bool]:
    """The ``doc-test`` comments on the lines just above the fence at index *fence*."""
    needs: list[str] = []
    continues = False
    i = fence - 1
    while i >= 0 and (lines[i].strip() == "" or _DIRECTIVE.match(lines[i].strip())):
        m = _DIRECTIVE.match(lines[i].strip())
        if m is not None:
            for part in m.group("body").split(";"):
                word, _, rest = part.strip().partition(" ")
                if word == "continues":
                    continues = True
                elif word == "needs":
                    needs.extend(n.strip() for n in rest.split(",") if n.strip())
                else:
                    raise ValueError(f"unknown doc-test directive {part!r} above line {fence + 1}")
        i -= 1
    return tuple(needs), continues


def parse(path: Path) -> list[Block]:
    """The Python blocks of the Markdown file at *path*."""
    lines = path.read_text(encoding="utf-8").splitlines()
    page = path.relative_to(ROOT).as_posix()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        fence, lang, start = m.group("fence"), m.group("lang").lower(), i
        body: list[str] = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i])
            i += 1
        i += 1  # the closing fence
        if lang in ("python", "py", "python3"):
            needs, continues = _directives(lines, start)
            code = textwrap.dedent("\n".join(body)) + "\n"
            blocks.append(Block(page, start + 1, code, needs, continues))
    return blocks


BLOCKS = [b for p in PAGES for b in parse(p)]


def _chain(block: Block) -> list[Block]:
    """The block and the blocks it continues, first to last."""
    same_page = [b for b in BLOCKS if b.page == block.page]
    at = same_page.index(block)
    start = at
    while same_page[start].continues and start > 0:
        start -= 1
    return same_page[start : at + 1]


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty working directory, on ``sys.path`` first; modules imported from it are
    forgotten afterwards."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)
    # a page may configure the timewheel loggers (docs/concepts.md shows how): undo it after
    loggers = {name: logging.getLogger(name) for name in ("timewheel", "")}
    saved = {
        name: (lg.level, lg.propagate, list(lg.handlers), list(lg.filters))
        for name, lg in loggers.items()
    }
    yield tmp_path
    for name, (level, propagate, handlers, filters) in saved.items():
        lg = loggers[name]
        lg.setLevel(level)
        lg.propagate = propagate
        lg.handlers[:] = handlers
        lg.filters[:] = filters
    for name in set(sys.modules) - before:
        where = getattr(sys.modules.get(name), "__file__", None)
        if where is not None and str(tmp_path) in str(where):
            del sys.modules[name]


def _uses_default_scheduler(code: str) -> bool:
    return re.search(r"\btw\.(schedule|cron|every|chain)\(|default_scheduler\(", code) is not None


def test_every_page_is_collected() -> None:
    pages_with_python = {b.page for b in BLOCKS}
    assert "README.md" in pages_with_python
    assert "docs/quickstart.md" in pages_with_python
    assert len(BLOCKS) >= 15


@pytest.mark.parametrize("block", BLOCKS, ids=str)
def test_block_runs_as_written(block: Block, workdir: Path) -> None:
    first = next(line for line in block.code.splitlines() if line.strip())
    reason = XFAIL.get((block.page, first.strip()))
    if reason is not None:
        pytest.xfail(reason)
    chain = _chain(block)
    namespace: dict[str, object] = {"__name__": "__main__"}
    needs = [*PAGE_NEEDS.get(block.page, ()), *(n for b in chain for n in b.needs)]
    for need in dict.fromkeys(needs):
        if need == "myapp":
            for rel, text in MYAPP.items():
                (workdir / rel).parent.mkdir(parents=True, exist_ok=True)
                (workdir / rel).write_text(text, encoding="utf-8")
        elif need in HELPERS:
            exec(textwrap.dedent(HELPERS[need]), namespace)
        else:
            raise AssertionError(f"{block}: no helper named {need!r} in tests/test_docs.py")
    try:
        for b in chain:
            exec(compile(b.code, str(b), "exec"), namespace)
        for name, value in list(namespace.items()):
            if name.startswith("test_") and callable(value):
                outcome = value()
                if inspect.iscoroutine(outcome):  # an async test (docs/testing.md, docs/async.md)
                    asyncio.run(outcome)
    finally:
        if any(_uses_default_scheduler(b.code) for b in chain):
            tw.default_scheduler().shutdown(wait=False)
