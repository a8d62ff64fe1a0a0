"""The command line."""

from __future__ import annotations

import io

import pytest

from timewheel.cli import main


def test_help_without_a_command() -> None:
    out = io.StringIO()
    assert main([], out=out) == 2
    assert "demo" in out.getvalue()


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
