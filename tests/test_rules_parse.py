"""Tests for cron expression text: the fields, the spellings refused and why, ``*`` in lists."""

from __future__ import annotations

from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import pytest

from timewheel.errors import InvalidScheduleError
from timewheel.rules import CronRule

UTC = timezone.utc


def ts(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> float:
    """Epoch seconds of a UTC wall time."""
    return datetime(year, month, day, hour, minute, second, tzinfo=ZoneInfo("UTC")).timestamp()


def first_fires(rule: CronRule, after: float, count: int) -> list[float]:
    out: list[float] = []
    t = after
    for _ in range(count):
        nxt = rule.next_after(t)
        assert nxt is not None
        out.append(nxt)
        t = nxt
    return out


def refusal(expr: str) -> str:
    with pytest.raises(InvalidScheduleError) as info:
        CronRule(expr)
    return str(info.value)


# ---------------------------------------------------------------------------------------------
# Malformed fields and expressions
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "needle"),
    [
        ("60 * * * *", "minute field '60': value 60 is out of range 0-59"),
        ("* 24 * * *", "hour field '24'"),
        ("* * 0 * *", "day-of-month field '0'"),
        ("* * 32 * *", "day-of-month field '32'"),
        ("* * * 13 *", "month field '13'"),
        ("* * * foo *", "month field 'foo': 'FOO' is neither a number nor a month name"),
        ("* * * * 8", "day-of-week field '8'"),
        ("* * * * xyz", "day-of-week field 'xyz'"),
        ("* * * * * 60", "second field '60'"),
        ("*/0 * * * *", "minute field '*/0': step 0 must be >= 1"),
        ("*/61 * * * *", "minute field '*/61': step 61 exceeds"),
        ("1-2-3 * * * *", "minute field '1-2-3'"),
        ("1,,2 * * * *", "minute field '1,,2': empty list item"),
        ("0-0 * * * *", "minute field '0-0': '0-0' is a range with equal ends"),
        ("* * * jan-jan *", "month field 'jan-jan'"),
        ("* * ? * *", "day-of-month field '?'"),
        ("* * 15W * *", "day-of-month field '15W'"),
        ("H * * * *", "minute field 'H'"),
        ("* * * * 1#6", "day-of-week field '1#6'"),
        ("* * * * 6/1", "day-of-week field '6/1' is [6] for croniter 7 but [0, 6] in classic cron"),
        ("* * * * 1/2", "day-of-week field '1/2'"),
        ("50-10/5 * * * *", "wrap-around range cannot take a step"),
    ],
)
def test_malformed_field_is_named(expr: str, needle: str) -> None:
    with pytest.raises(InvalidScheduleError) as info:
        CronRule(expr)
    assert needle in str(info.value)


@pytest.mark.parametrize("expr", ["0 0 30 2 *", "0 0 31 4,6,9,11 *", "0 0 30,31 2 *", "0 0 31 2 *"])
def test_never_firing_expression_refused(expr: str) -> None:
    with pytest.raises(InvalidScheduleError, match="can never fire"):
        CronRule(expr)


def test_day_or_week_makes_feb_30_fire() -> None:
    rule = CronRule("0 0 30 2 1")  # OR semantics: every Monday in February
    assert rule.next_after(ts(2026, 1, 1)) == ts(2026, 2, 2)


@pytest.mark.parametrize(
    ("expr", "needle"),
    [
        ("@reboot", "'@reboot' is not supported"),
        ("@every 5m", "use an interval"),
        ("@often", "unknown cron alias"),
        ("* * * *", "expected 5 fields"),
        ("* * * * * * *", "got 7"),
        ("", "got 0"),
        ("0 30 9 * * *", "write '30 9 * * * 0'"),  # seconds-first spelling
        ("0 0 12 * * *", "ambiguous cron expression"),  # seconds-first, valid either way
    ],
)
def test_expression_shape_errors(expr: str, needle: str) -> None:
    with pytest.raises(InvalidScheduleError) as info:
        CronRule(expr)
    assert needle in str(info.value)


@pytest.mark.parametrize("expr", [None, 5, b"* * * * *", ["*"] * 5])
def test_expression_type_errors(expr: object) -> None:
    with pytest.raises(InvalidScheduleError, match="must be a str"):
        CronRule(expr)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# A list item '*' is the whole field
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "same_as"),
    [
        ("*,5 * * * *", "* * * * *"),
        ("5,* * * * *", "* * * * *"),
        ("0 *,3 * * *", "0 * * * *"),
        ("* * * * *,0", "* * * * *"),
        ("* * * * * *,0", "* * * * * *"),
        ("0 0 * * 1,*", "0 0 * * *"),
        ("0 0 * * *,sat#3", "0 0 * * *"),
        ("0 0 1 1,* *", "0 0 1 * *"),
        # day-of-month starts with '*': both day fields must match, so Mondays only
        ("0 0 *,13 * 1", "0 0 * * 1"),
        # neither day field starts with '*': either may match, and one matches every day
        ("0 0 13 * 1,*", "0 0 * * *"),
        ("0 0 5,* * 1", "0 0 * * *"),
        ("0 0 13 * *,5", "0 0 13 * *"),
    ],
)
def test_a_star_in_a_list_is_every_value(expr: str, same_as: str) -> None:
    start = ts(2026, 1, 1)
    assert first_fires(CronRule(expr), start, 40) == first_fires(CronRule(same_as), start, 40)


def test_a_star_in_a_list_still_checks_the_other_items() -> None:
    assert "value 61 is out of range 0-59" in refusal("*,61 * * * *")
    assert "the week number after '#' must be 1-5" in refusal("0 0 * * *,sat#6")


def test_a_second_field_of_every_second_is_ambiguous_however_spelled() -> None:
    assert "ambiguous cron expression" in refusal("0 0 12 * * *,5")


# ---------------------------------------------------------------------------------------------
# Non-ASCII characters
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "needle"),
    [
        ("0\u00a00 * * *", "U+00A0 NO-BREAK SPACE at index 1 is a non-ASCII space"),
        ("0\u30000 * * *", "U+3000 IDEOGRAPHIC SPACE at index 1 is a non-ASCII space"),
        ("0 0 * * *\u00a0", "U+00A0 NO-BREAK SPACE at index 9"),
        ("\u20030 0 * * *", "U+2003 EM SPACE at index 0"),
        ("\uff10 0 * * *", "U+FF10 FULLWIDTH DIGIT ZERO at index 0 is a non-ASCII character"),
    ],
)
def test_non_ascii_characters_are_refused_by_name(expr: str, needle: str) -> None:
    message = refusal(expr)
    assert needle in message
    assert "ASCII" in message


def test_ascii_whitespace_still_separates_fields() -> None:
    start = ts(2026, 1, 1)
    expected = first_fires(CronRule("0 0 * * *"), start, 3)
    assert first_fires(CronRule(" 0\t0  * *\t* "), start, 3) == expected


# ---------------------------------------------------------------------------------------------
# Spellings from other cron dialects: each refusal names the problem and the way out
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "needles"),
    [
        # 'L' inside a range or with a step
        ("0 0 L/2 * *", ["'L' (the last day of the month) stands alone", "'1-15,L'"]),
        ("0 0 */L * *", ["'L' (the last day of the month) stands alone"]),
        ("0 0 1-L * *", ["'L' (the last day of the month) cannot end a range", "'1-31'"]),
        ("0 0 L-3 * *", ["Quartz's 'L-n'", "'L' alone is the last day of the month"]),
        ("0 0 * * 1-5L", ["'L' takes one day", "not a range or a step", "'1L,5L'"]),
        ("0 0 * * 5L/2", ["'L' takes one day", "not a range or a step"]),
        ("0 0 * * L-2", ["'L' takes one day"]),
        # 'L' before the day: names the day it was meant for
        ("0 0 * * L2", ["write the last Tuesday of the month as '2L'"]),
        ("0 0 * * L5", ["write the last Friday of the month as '5L'"]),
        ("0 0 * * LSUN", ["write the last Sunday of the month as '0L'"]),
        ("0 0 * * L", ["'L' alone is not a day of the week", "'5L'", "'SAT'"]),
        # random and hashed values
        ("R * * * *", ["minute field 'R'", "random values ('R')", "jitter="]),
        ("0 R * * *", ["hour field 'R'", "random values ('R')"]),
        ("H * * * *", ["minute field 'H'", "hashed values ('H'", "jitter="]),
        # '#' with a range
        ("0 0 * * MON-FRI#1", ["'#' takes one day", "not a range", "'1#1,2#1,3#1,4#1,5#1'"]),
        ("0 0 * * FRI-MON#2", ["'5#2,6#2,0#2,1#2'"]),
        ("0 0 * * *#1", ["'#' takes one day and a week number 1-5"]),
        # plain days mixed with '#'/'L' days
        (
            "0 0 * * 1,2,3#1",
            [
                "day-of-week field '1,2,3#1'",
                "plain days (1,2) and '#'/'L' days (3#1) cannot be mixed",
                "one with day-of-week '1,2' and one with '3#1'",
            ],
        ),
        ("0 0 * * 5,4L", ["plain days (5) and '#'/'L' days (4L)"]),
        # a zone inside the expression
        (
            "CRON_TZ=Europe/Berlin 0 9 * * *",
            ["'CRON_TZ=Europe/Berlin' sets a time zone", "tz='Europe/Berlin'", "'0 9 * * *'"],
        ),
        ("TZ=UTC 0 9 * * *", ["'TZ=UTC' sets a time zone", "tz='UTC'"]),
        # a year field
        ("0 0 1 1 * 0 2027", ["got 7 fields", "a seventh field (a year", "start= and end="]),
        ("0 0 1 1 * 2027", ["second field '2027'", "looks like a year", "start= and end="]),
    ],
)
def test_other_dialects_are_refused_with_a_way_out(expr: str, needles: list[str]) -> None:
    message = refusal(expr)
    for needle in needles:
        assert needle in message
    assert "dow=" not in message  # no croniter internals
    assert "nth=" not in message


def test_the_supported_neighbours_of_refused_spellings_work() -> None:
    start = ts(2026, 1, 1)
    got = first_fires(CronRule("0 0 1-15,L * *"), start, 16)
    assert [datetime.fromtimestamp(t, UTC).day for t in got] == [*range(2, 16), 31, 1]
    got = first_fires(CronRule("0 0 * * 1#1,2#1,3#1,4#1,5#1"), ts(2025, 12, 31), 5)
    assert [datetime.fromtimestamp(t, UTC).day for t in got] == [1, 2, 5, 6, 7]
    got = first_fires(CronRule("0 0 * * 1L,5L"), start, 2)
    assert [datetime.fromtimestamp(t, UTC).strftime("%a %d") for t in got] == [
        "Mon 26",
        "Fri 30",
    ]
