"""What the ``timewheel`` subcommands share: exit statuses, the one-line :class:`CommandError`,
argument types, the parser classes, opening a store from its URL, and judging stored functions
as a worker would."""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NoReturn
from urllib.parse import unquote, urlsplit

from timewheel.stores.base import SupportsInspection
from timewheel.version import __version__

if TYPE_CHECKING:
    from timewheel.refs import Allowlist
    from timewheel.stores.base import Store

__all__ = [
    "DISTRIBUTION",
    "RUNTIME",
    "SCAN_LIMIT",
    "USAGE",
    "CommandError",
    "Formatter",
    "OpenedStore",
    "Parser",
    "Verdict",
    "count",
    "fail",
    "inspection",
    "judge",
    "module_names",
    "open_url",
    "positive_int",
    "positive_seconds",
    "queue_names",
    "ready_by_function",
    "seconds",
    "version",
]


USAGE = 2
"""Exit status of a wrong command line (argparse's convention)."""
RUNTIME = 1
"""Exit status of a problem met while running."""

SCAN_LIMIT = 50_000
"""Tasks read at most to group READY work by function."""


class CommandError(SystemExit):
    """A problem the user can fix; ``str()`` is the message and ``code`` the exit status.

    :func:`main` prints the message on stderr before raising, so a console script that lets it
    propagate exits with the status and no traceback.
    """

    def __init__(self, message: str, status: int = RUNTIME) -> None:
        super().__init__(message)
        self.code = status


def fail(message: str, status: int = RUNTIME) -> NoReturn:
    """Stop the command with a :class:`CommandError` (*message*, exit *status*)."""
    raise CommandError(message, status)


def inspection(store: Store) -> SupportsInspection | None:
    """*store* if it offers the inspection methods, else None."""
    return store if isinstance(store, SupportsInspection) else None


# -- argument types ------------------------------------------------------------------------------
def _number(text: str, kind: Callable[[str], float]) -> float:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def positive_int(text: str) -> int:
    """An argument type: an int of 1 or more."""
    value = int(_number(text, int))
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more (got {text})")
    return value


def count(text: str) -> int:
    """An argument type: an int of 0 or more."""
    value = int(_number(text, int))
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more (got {text})")
    return value


def positive_seconds(text: str) -> float:
    """An argument type: seconds above 0."""
    value = _number(text, float)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0 (got {text})")
    return value


def seconds(text: str) -> float:
    """An argument type: seconds, 0 or more."""
    value = _number(text, float)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, 0 or more (got {text})")
    return value


def queue_names(text: str) -> list[str]:
    """An argument type: comma-separated queue names."""
    names = [q.strip() for q in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(
            f"{text!r} has an empty queue name; write e.g. mail,billing"
        )
    return names


def module_names(text: str) -> list[str]:
    """An argument type: comma-separated module names an ``Allowlist`` accepts."""
    from timewheel.errors import TimewheelError
    from timewheel.refs import Allowlist

    names = [m.strip() for m in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(
            f"{text!r} has an empty module name; write e.g. myapp.jobs,myapp.billing"
        )
    try:
        Allowlist(names)
    except TimewheelError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return names


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``timewheel worker: <problem>; see ... --help``."""

    def error(self, message: str) -> NoReturn:
        """Print *message* on one line and stop with status 2."""
        print(f"{self.prog}: {message}; see '{self.prog} --help'", file=sys.stderr)
        raise CommandError(message, USAGE)


class Formatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the layout of descriptions and epilogs, and shows each option's default."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            "%(default)" not in text
            and default not in (None, argparse.SUPPRESS)
            and action.option_strings
            and action.nargs != 0  # a flag: its help says what it does
        ):
            text += " (default: %(default)s)"
        return text


# -- version -------------------------------------------------------------------------------------
DISTRIBUTION = "pytimewheel"
"""The name timewheel is published under on PyPI (``pip install pytimewheel``)."""


def version() -> str:
    """The installed distribution's version, or the package's own when run from a source tree."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version(DISTRIBUTION)
    except PackageNotFoundError:
        return f"{__version__} (not installed; from the source tree)"


# -- opening stores ------------------------------------------------------------------------------
def _sqlite_path(url: str) -> str | None:
    """The file an ``sqlite://`` URL names, or None for other URLs (``open_store`` judges them)."""
    parts = urlsplit(url)
    if parts.scheme != "sqlite" or parts.netloc:
        return None
    path = unquote(parts.path[1:] if parts.path.startswith("/") else parts.path)
    return os.path.abspath(path) if path else None


def _check_exists(url: str, path: str, *, create_hint: bool) -> None:
    """Refuse a store file that is not there: a mistyped path must not become a new store."""
    if os.path.exists(path):
        return
    parent = os.path.dirname(path)
    if not os.path.isdir(parent):
        fail(
            f"no store at {path!r} ({url}): the directory {parent!r} does not exist; check the "
            "path (sqlite:///relative.db is relative to the working directory, "
            "sqlite:////absolute/path.db has four slashes)"
        )
    hint = ", or pass --create to start an empty store there" if create_hint else ""
    fail(
        f"no store at {path!r} ({url}); check the path (sqlite:///relative.db is relative to "
        f"the working directory {os.getcwd()!r}){hint}"
    )


@dataclass
class OpenedStore:
    """A store opened from *url*; :meth:`close` closes it and runs the *cleanup* callbacks."""

    store: Store
    url: str
    cleanup: list[Callable[[], None]] = field(default_factory=list)

    def close(self) -> None:
        """Close the store, then run the cleanup callbacks."""
        self.store.close()
        for fn in self.cleanup:
            fn()


def open_url(url: str, *, create: bool = False, read_only_ok: bool = False) -> OpenedStore:
    """Open the store *url* names, refusing a missing file unless *create*; with *read_only_ok*
    (``inspect``), read-only, so a store the user may only read can be inspected."""
    from timewheel.errors import StoreConfigError, TimewheelError
    from timewheel.stores import open_store

    path = _sqlite_path(url)
    options: dict[str, bool] = {}
    if path is not None:
        if not create:
            _check_exists(url, path, create_hint=not read_only_ok)
        options = {"create": create, "read_only": read_only_ok}
    elif urlsplit(url).scheme == "postgresql":
        # a mistyped schema must not become a new store either: `migrate` or --create makes one
        options = {"create": create, "read_only": read_only_ok}
    try:
        store = open_store(url, **options)
    except StoreConfigError as e:
        fail(f"{e}", USAGE)
    except TimewheelError as e:
        fail(f"{e}")
    return OpenedStore(store, url)


def ready_by_function(store: Store, limit: int = SCAN_LIMIT) -> tuple[dict[str, list[float]], bool]:
    """Due times of READY tasks grouped by function (earliest first), and whether *limit* hit."""
    from timewheel.task import TaskState

    tasks = store.tasks(state=TaskState.READY, limit=limit)
    out: dict[str, list[float]] = {}
    for t in tasks:
        out.setdefault(t.func_name, []).append(t.due)
    return out, len(tasks) >= limit


@dataclass(frozen=True)
class Verdict:
    """What a worker does with a stored function reference."""

    refused: str | None = None  # why no worker (with the allowlist given) runs it
    import_problem: str | None = None  # allowed, but it does not resolve in this process
    checked: bool = True  # False: its module is outside the allowlist given, so not imported


def judge(ref: str, allowlist: Allowlist | None, *, imports: bool = True) -> Verdict:
    """Judge *ref* as a worker with *allowlist* would (``None``: no allowlist known, so only the
    rules every allowlist applies), importing only modules the allowlist allows."""
    from timewheel import refs

    problem = refs.reference_problem(ref)
    if problem is None and allowlist is not None:
        problem = allowlist.problem(ref)
    if problem is not None:
        return Verdict(refused=problem)
    if not imports:
        return Verdict(checked=False)
    sys.path.insert(0, os.getcwd())
    try:
        if allowlist is not None:
            allowlist.resolve(ref)
        else:
            refs.resolve_ref(ref)  # never imports a module no allowlist of this process allows
    except refs.ReferenceNotAllowedError as e:
        if allowlist is None:
            return Verdict(checked=False)
        return Verdict(refused=str(e))  # the object found is not defined in an allowed module
    except refs.UnresolvableRefError as e:
        return Verdict(import_problem=str(e))
    except Exception as e:  # importing the module ran its code, which raised
        return Verdict(import_problem=f"importing it raised {type(e).__name__}: {e}")
    finally:
        sys.path.pop(0)
    return Verdict()
