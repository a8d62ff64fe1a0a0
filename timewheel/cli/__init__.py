"""The ``timewheel`` command line.

* ``timewheel demo``: a ~10 s self-contained run on the in-memory store (``--quick``: ~2 s).
* ``timewheel worker MODULE[:ATTR] --store URL``: trigger and run tasks from a shared store.
* ``timewheel inspect --store URL``: counts, overdue work, missed slots, failures and the load
  expected over the next hour (``--json`` for scripts).

Errors a user can fix print one line, ``timewheel: <problem>; <fix>``, on stderr: status 2 for a
wrong command line (bad option values, an unknown store URL, a target that cannot be a worker),
1 for a problem met while running (a missing, read-only or damaged store). :func:`main` returns
the status of a successful run and raises ``SystemExit`` with the status otherwise, like
``argparse``.

This package assembles the parser and dispatches; each command lives in its own module
(:mod:`~timewheel.cli.demo`, :mod:`~timewheel.cli.worker`, :mod:`~timewheel.cli.inspect`,
:mod:`~timewheel.cli.migrate`, :mod:`~timewheel.cli.dashboard`), on the helpers of
:mod:`~timewheel.cli.common`.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import TextIO

from timewheel.cli import dashboard, demo, inspect, migrate, worker
from timewheel.cli.common import (
    RUNTIME,
    USAGE,
    CommandError,
    Formatter,
    Parser,
    count,
    module_names,
    positive_int,
    positive_seconds,
    queue_names,
    seconds,
    version,
)

__all__ = ["CommandError", "main", "version"]


def _parser() -> Parser:
    parser = Parser(
        prog="timewheel",
        description="timewheel: an embeddable task scheduler. Run a subcommand with --help "
        "for its options; without a subcommand this help is printed (exit status 2).",
        formatter_class=Formatter,
    )
    parser.add_argument("--version", action="version", version=f"timewheel {version()}")
    sub = parser.add_subparsers(
        dest="command", metavar="{demo,worker,inspect,migrate}", parser_class=Parser
    )

    demo_parser = sub.add_parser(
        "demo", help="a ~10 s self-contained run on the in-memory store", formatter_class=Formatter
    )
    demo_parser.add_argument(
        "--tasks", type=count, default=3000, help="one-shot tasks spread in time"
    )
    demo_parser.add_argument(
        "--seconds", type=positive_seconds, default=8.0, help="spread of their due times"
    )
    demo_parser.add_argument("--workers", type=positive_int, default=8, help="worker threads")
    demo_parser.add_argument("--seed", type=int, default=1, help="random seed")
    demo_parser.add_argument(
        "--burst", type=count, default=10_000, help="tasks due at once at the end"
    )
    demo_parser.add_argument(
        "--quick",
        action="store_true",
        help="a ~2 s run (300 tasks over 1 s, a burst of 1,000); overrides --tasks, --seconds "
        "and --burst",
    )

    worker_parser = sub.add_parser(
        "worker",
        help="trigger and run tasks from a shared store",
        description="Trigger and run the tasks of a shared store (several workers may share one).",
        epilog=worker.EPILOG,
        formatter_class=Formatter,
    )
    worker_parser.add_argument(
        "target", metavar="TARGET", help="MODULE or MODULE:ATTR to import (see below)"
    )
    worker_parser.add_argument(
        "--store",
        metavar="URL",
        help="store URL, e.g. sqlite:///tasks.db; required unless TARGET gives a Scheduler",
    )
    worker_parser.add_argument(
        "--create",
        action="store_true",
        help="create the store if it does not exist (without it, a missing store is an error)",
    )
    worker_parser.add_argument(
        "--queues",
        type=queue_names,
        metavar="NAMES",
        help="comma-separated queue names to serve (default: all)",
    )
    worker_parser.add_argument(
        "--allow",
        type=module_names,
        action="append",
        metavar="MODULES",
        help="comma-separated modules or packages whose functions run from stored import paths, "
        "besides registered names and the target module's package (repeatable)",
    )
    worker_parser.add_argument(
        "--concurrency", type=positive_int, default=8, metavar="N", help="worker threads"
    )
    worker_parser.add_argument(
        "--grace",
        type=seconds,
        default=30.0,
        metavar="SECONDS",
        help="seconds to wait for running tasks after Ctrl-C or SIGTERM",
    )
    worker_parser.add_argument(
        "--report",
        type=seconds,
        default=0.0,
        metavar="SECONDS",
        help="print progress every SECONDS (0: never)",
    )

    inspect_parser = sub.add_parser(
        "inspect",
        help="counts, overdue work, failures and upcoming load of a store",
        description="What an operator needs to know about a store, read without changing it.",
        epilog=inspect.EPILOG,
        formatter_class=Formatter,
    )
    required = inspect_parser.add_argument_group("required arguments")
    required.add_argument(
        "--store", metavar="URL", required=True, help="store URL, e.g. sqlite:///tasks.db"
    )
    inspect_parser.add_argument(
        "--horizon",
        type=positive_seconds,
        default=3600.0,
        metavar="SECONDS",
        help="look-ahead for the load histogram",
    )
    inspect_parser.add_argument(
        "--bucket",
        type=positive_seconds,
        default=60.0,
        metavar="SECONDS",
        help="width of a histogram bucket",
    )
    inspect_parser.add_argument(
        "--failures", type=count, default=10, metavar="N", help="latest failures to show"
    )
    inspect_parser.add_argument(
        "--allow",
        type=module_names,
        action="append",
        metavar="MODULES",
        help="judge stored functions as a worker allowing these modules would (comma-separated, "
        "repeatable; give what your workers allow); only these modules are imported",
    )
    inspect_parser.add_argument(
        "--no-imports",
        dest="imports",
        action="store_false",
        help="do not import the modules of waiting tasks' functions (inside --allow) to check "
        "that they resolve",
    )
    inspect_parser.add_argument("--json", action="store_true", help="print one JSON document")

    migrate_parser = sub.add_parser(
        "migrate",
        help="create a store, or upgrade its schema to this version",
        description="Create the store URL names, or migrate its schema to this timewheel's "
        "version (a schema newer than this timewheel is refused and left untouched).",
        formatter_class=Formatter,
    )
    migrate_required = migrate_parser.add_argument_group("required arguments")
    migrate_required.add_argument(
        "--store",
        metavar="URL",
        required=True,
        help="store URL, e.g. postgresql://user@host/db?schema=app1",
    )
    dashboard_parser = sub.add_parser(
        "dashboard",
        help="serve a web dashboard of a store (the dashboard extra)",
        description="Serve the web dashboard of a store. Writes need the token printed at start "
        "(or set TIMEWHEEL_DASHBOARD_TOKEN).",
        formatter_class=Formatter,
    )
    required = dashboard_parser.add_argument_group("required arguments")
    required.add_argument(
        "--store", metavar="URL", required=True, help="store URL, e.g. sqlite:///tasks.db"
    )
    dashboard_parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    dashboard_parser.add_argument(
        "--port", type=positive_int, default=8000, metavar="N", help="port"
    )
    dashboard_parser.add_argument(
        "--read-only", action="store_true", help="open the store read-only and offer no actions"
    )
    dashboard_parser.add_argument(
        "--show-arguments", action="store_true", help="show task arguments and results"
    )
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Entry point of the ``timewheel`` console script.

    Returns the exit status of a run that completed; a wrong command line or a problem met while
    running prints one line on stderr and raises :class:`CommandError` (a ``SystemExit``) with
    status 2 or 1. Without a subcommand it prints the help and returns 2.
    """
    out = out or sys.stdout
    parser = _parser()
    args = parser.parse_args(argv)
    commands: dict[str, Callable[[argparse.Namespace, TextIO], int]] = {
        "demo": demo.run,
        "worker": worker.run,
        "inspect": inspect.run,
        "migrate": migrate.run,
        "dashboard": dashboard.run,
    }
    if args.command is None:
        parser.print_help(out)
        return USAGE
    from timewheel.errors import TimewheelError

    try:
        return commands[args.command](args, out)
    except CommandError as e:
        print(f"timewheel: {e}", file=sys.stderr)
        raise
    except TimewheelError as e:  # met while running: the store's messages name the fix
        print(f"timewheel: {e}", file=sys.stderr)
        raise CommandError(str(e), RUNTIME) from None
    except BrokenPipeError:
        # the reader went away (`timewheel inspect ... | head -1`): stop quietly, as other
        # command-line tools do; stdout goes to /dev/null so the interpreter's final flush
        # cannot fail again
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass  # not a real file descriptor (a StringIO in tests)
        finally:
            os.close(devnull)
        return RUNTIME
    except KeyboardInterrupt:
        print("timewheel: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT


if __name__ == "__main__":
    sys.exit(main())
