"""Tests for timewheel.rules: cron rules with zones and DST, intervals, misfire planning."""

from __future__ import annotations

import calendar
import itertools
import json
import math
import random
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from timewheel.errors import InvalidScheduleError
from timewheel.rules import (
    DEFAULT_SKIP_GRACE,
    CronRule,
    IntervalRule,
    Misfire,
    MisfirePlan,
    Overlap,
    Rule,
    make_rule,
    parse_every,
    plan_misfires,
    rule_from_spec,
)

UTC = timezone.utc
NY = "America/New_York"
LONDON = "Europe/London"


def ts(
    year: int,
    month: int,
    day: int,
    hour: int = 0,
    minute: int = 0,
    second: int = 0,
    *,
    tz: str = "UTC",
) -> float:
    """Epoch seconds of a local wall time in ``tz`` (fold=0)."""
    return datetime(year, month, day, hour, minute, second, tzinfo=ZoneInfo(tz)).timestamp()


def fires(rule: Rule, after: float, before: float) -> list[float]:
    """Every fire instant in ``(after, before)``, by chaining next_after."""
    out: list[float] = []
    t: float | None = after
    while True:
        assert t is not None
        t = rule.next_after(t)
        if t is None or t >= before:
            return out
        out.append(t)


def local(t: float, tz: str) -> str:
    return datetime.fromtimestamp(t, ZoneInfo(tz)).isoformat()


def utc(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# ---------------------------------------------------------------------------------------------
# Counting over a year and over DST days
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("year", "expected"), [(2025, 365), (2024, 366)])
def test_daily_fires_once_per_day_over_a_year(year: int, expected: int) -> None:
    rule = CronRule("0 0 * * *")
    got = fires(rule, ts(year, 1, 1) - 1, ts(year + 1, 1, 1))
    assert len(got) == expected
    assert got[0] == ts(year, 1, 1)
    assert all(b - a == 86400 for a, b in itertools.pairwise(got))


@pytest.mark.parametrize(
    ("expr", "day", "expected"),
    [
        ("* * * * *", (2026, 3, 8), 1380),  # spring forward: 02:00-02:59 do not exist
        ("* * * * *", (2026, 11, 1), 1500),  # fall back: 01:00-01:59 in both passes
        ("0 * * * *", (2026, 3, 8), 23),
        ("0 * * * *", (2026, 11, 1), 25),
        ("0 0 * * *", (2026, 3, 8), 1),
        ("30 1 * * *", (2026, 11, 1), 1),  # fixed time: once, in the first pass
        ("30 2 * * *", (2026, 3, 8), 1),  # fixed time in the gap: once, after the gap
    ],
)
def test_new_york_dst_day_counts(expr: str, day: tuple[int, int, int], expected: int) -> None:
    start = ts(*day, tz=NY)
    end = (datetime(*day) + timedelta(days=1)).replace(tzinfo=ZoneInfo(NY)).timestamp()
    got = fires(CronRule(expr, NY), start - 1, end)
    assert len(got) == expected
    assert got == sorted(set(got))


@pytest.mark.parametrize(
    ("expr", "tz", "after", "expected_utc", "expected_local"),
    [
        # New York spring forward 2026-03-08: 02:00 EST -> 03:00 EDT
        ("30 2 * * *", NY, (2026, 3, 7, 12), "2026-03-08T07:00:00Z", "2026-03-08T03:00:00-04:00"),
        # New York fall back 2026-11-01: 02:00 EDT -> 01:00 EST, first pass only
        ("30 1 * * *", NY, (2026, 10, 31, 12), "2026-11-01T05:30:00Z", "2026-11-01T01:30:00-04:00"),
        # London spring forward 2026-03-29: 01:00 GMT -> 02:00 BST
        (
            "30 1 * * *",
            LONDON,
            (2026, 3, 28, 12),
            "2026-03-29T01:00:00Z",
            "2026-03-29T02:00:00+01:00",
        ),
        # London fall back 2026-10-25: 02:00 BST -> 01:00 GMT, first pass only
        (
            "30 1 * * *",
            LONDON,
            (2026, 10, 24, 12),
            "2026-10-25T00:30:00Z",
            "2026-10-25T01:30:00+01:00",
        ),
    ],
)
def test_fixed_time_jobs_across_transitions(
    expr: str, tz: str, after: tuple[int, ...], expected_utc: str, expected_local: str
) -> None:
    rule = CronRule(expr, tz)
    first = rule.next_after(ts(*after, tz=tz))
    assert first is not None
    assert utc(first) == expected_utc
    assert local(first, tz) == expected_local
    # exactly one fire on the transition day and one on each neighbouring day
    three_days = fires(rule, ts(*after, tz=tz) - 86400, ts(*after, tz=tz) + 2 * 86400)
    days = [datetime.fromtimestamp(t, ZoneInfo(tz)).date() for t in three_days]
    assert len(days) == len(set(days)) == 3


def test_fixed_job_in_gap_reached_by_reseek_and_chain_agree() -> None:
    rule = CronRule("30 2 * * *", NY)
    chained = fires(rule, ts(2026, 3, 6, tz=NY), ts(2026, 3, 11, tz=NY))
    fresh = [CronRule("30 2 * * *", NY).next_after(t - 0.5) for t in chained]
    assert fresh == chained
    # 03:00 EDT on 03-08 is followed by 02:30 EDT on 03-09: strictly increasing, no day twice
    assert [local(t, NY)[:16] for t in chained] == [
        "2026-03-06T02:30",
        "2026-03-07T02:30",
        "2026-03-08T03:00",
        "2026-03-09T02:30",
        "2026-03-10T02:30",
    ]


def test_wildcard_job_runs_both_passes_in_order() -> None:
    rule = CronRule("*/20 1 * * *", NY)
    got = fires(rule, ts(2026, 11, 1, tz=NY), ts(2026, 11, 1, 3, tz=NY))
    assert [local(t, NY) for t in got] == [
        "2026-11-01T01:00:00-04:00",
        "2026-11-01T01:20:00-04:00",
        "2026-11-01T01:40:00-04:00",
        "2026-11-01T01:00:00-05:00",
        "2026-11-01T01:20:00-05:00",
        "2026-11-01T01:40:00-05:00",
    ]


def test_wildcard_job_skips_nonexistent_times() -> None:
    # '30 * * * *' is a wildcard job: 02:30 does not exist on 2026-03-08, and it does not run
    # at 03:00 instead (Vixie cron runs only fixed-time jobs after the gap)
    got = fires(CronRule("30 * * * *", NY), ts(2026, 3, 8, 1, tz=NY), ts(2026, 3, 8, 4, tz=NY))
    assert [local(t, NY)[11:16] for t in got] == ["01:30", "03:30"]


def test_several_gap_times_of_a_fixed_job_fire_once() -> None:
    got = fires(CronRule("0,30 2 * * *", NY), ts(2026, 3, 8, tz=NY), ts(2026, 3, 9, tz=NY))
    assert [local(t, NY) for t in got] == ["2026-03-08T03:00:00-04:00"]


def test_lord_howe_half_hour_dst() -> None:
    tz = "Australia/Lord_Howe"  # 2026-10-04 02:00 -> 02:30; 2026-04-05 02:00 -> 01:30
    rule = CronRule("15 2 * * *", tz)
    first = rule.next_after(ts(2026, 10, 3, 12, tz=tz))
    assert first is not None
    assert local(first, tz) == "2026-10-04T02:30:00+11:00"
    assert (
        len(fires(CronRule("* * * * *", tz), ts(2026, 10, 4, tz=tz) - 1, ts(2026, 10, 5, tz=tz)))
        == 1410
    )
    got = fires(CronRule("45 1 * * *", tz), ts(2026, 4, 4, 12, tz=tz), ts(2026, 4, 5, 12, tz=tz))
    assert [local(t, tz) for t in got] == ["2026-04-05T01:45:00+11:00"]


def test_reseek_inside_repeated_hour() -> None:
    rule = CronRule("*/30 * * * *", NY)
    second_pass = ts(2026, 11, 1, 6, 10)  # 01:10 EST, in the second pass
    nxt = rule.next_after(second_pass)
    assert nxt is not None
    assert local(nxt, NY) == "2026-11-01T01:30:00-05:00"
    first_pass = ts(2026, 11, 1, 5, 40)  # 01:40 EDT, first pass
    nxt = rule.next_after(first_pass)
    assert nxt is not None
    assert local(nxt, NY) == "2026-11-01T01:00:00-05:00"


# ---------------------------------------------------------------------------------------------
# Calendar corners, seconds, aliases
# ---------------------------------------------------------------------------------------------


def test_month_ends_skip_short_months() -> None:
    got = fires(CronRule("0 0 31 * *"), ts(2026, 1, 1), ts(2027, 1, 1))
    assert [datetime.fromtimestamp(t, UTC).month for t in got] == [1, 3, 5, 7, 8, 10, 12]


def test_last_day_of_month() -> None:
    got = fires(CronRule("0 0 L * *"), ts(2024, 1, 1), ts(2025, 1, 1))
    assert [datetime.fromtimestamp(t, UTC).day for t in got] == [
        calendar.monthrange(2024, m)[1] for m in range(1, 13)
    ]


def test_leap_day_fires_only_in_leap_years() -> None:
    got = fires(CronRule("0 0 29 2 *"), ts(2023, 1, 1), ts(2105, 1, 1))
    years = [datetime.fromtimestamp(t, UTC).year for t in got]
    assert years == [y for y in range(2023, 2105) if calendar.isleap(y)]
    assert 2100 not in years


def test_day_of_month_or_day_of_week() -> None:
    # both restricted: either matches (the 13th, or any Friday)
    got = fires(CronRule("0 0 13 * 5"), ts(2026, 2, 1), ts(2026, 3, 1))
    days = [datetime.fromtimestamp(t, UTC).day for t in got]
    assert days == [6, 13, 20, 27]
    # a field starting with '*' makes it AND (Vixie): odd days that are Mondays
    got = fires(CronRule("0 0 */2 * 1"), ts(2026, 2, 1), ts(2026, 4, 1))
    assert all(datetime.fromtimestamp(t, UTC).weekday() == 0 for t in got)
    assert all(datetime.fromtimestamp(t, UTC).day % 2 == 1 for t in got)


def test_nth_and_last_weekday() -> None:
    got = fires(CronRule("0 9 * * 1#2"), ts(2026, 1, 1), ts(2026, 4, 1))
    assert [utc(t)[:10] for t in got] == ["2026-01-12", "2026-02-09", "2026-03-09"]
    got = fires(CronRule("0 9 * * 5L"), ts(2026, 1, 1), ts(2026, 4, 1))
    assert [utc(t)[:10] for t in got] == ["2026-01-30", "2026-02-27", "2026-03-27"]


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        # the 15th, or the second Friday (9 Jan, 13 Feb, 13 Mar)
        ("0 0 15 * fri#2", ["01-09", "01-15", "02-13", "02-15", "03-13", "03-15"]),
        # the 13th, or the last Friday (30 Jan, 27 Feb, 27 Mar)
        ("0 0 13 * 5L", ["01-13", "01-30", "02-13", "02-27", "03-13", "03-27"]),
        # the 13th, or the second Friday; 13 Feb and 13 Mar are both, and fire once
        ("0 0 13 * 5#2", ["01-09", "01-13", "02-13", "03-13"]),
        # the last day, or the first Friday (2 Jan, 6 Feb, 6 Mar)
        ("0 0 L * 5#1", ["01-02", "01-31", "02-06", "02-28", "03-06", "03-31"]),
        # several '#'/'L' days ORed with several days of the month
        (
            "0 0 1,20 * 1#1,5L",
            [
                *("01-05", "01-20", "01-30"),
                *("02-01", "02-02", "02-20", "02-27"),
                *("03-01", "03-02", "03-20", "03-27"),
            ],
        ),
        # a day field starting with '*' keeps both fields ANDed: odd days that are second Fridays
        ("0 0 */2 * 5#2", ["01-09", "02-13", "03-13"]),
    ],
)
def test_restricted_day_fields_are_ored_with_nth_and_last_weekdays(
    expr: str, expected: list[str]
) -> None:
    got = fires(CronRule(expr), ts(2026, 1, 1), ts(2026, 4, 1))
    assert [utc(t)[5:10] for t in got] == expected


def test_a_star_item_makes_day_of_week_every_day_despite_nth() -> None:
    got = fires(CronRule("0 0 * * *,sat#3"), ts(2026, 1, 1), ts(2026, 2, 1))
    assert [utc(t)[5:10] for t in got] == [f"01-{day:02}" for day in range(2, 32)]


def test_a_day_field_that_can_never_match_leaves_the_other() -> None:
    # no 30 February: the first Friday of February still fires (the 2026 one is the 6th)
    rule = CronRule("0 0 30 2 5#1")
    got = fires(rule, ts(2026, 1, 1), ts(2028, 3, 1))
    assert [utc(t)[:10] for t in got] == ["2026-02-06", "2027-02-05", "2028-02-04"]


def test_seconds_field_is_last() -> None:
    rule = CronRule("* * * * * */15")
    got = fires(rule, ts(2026, 1, 1), ts(2026, 1, 1, 0, 1))
    assert [datetime.fromtimestamp(t, UTC).second for t in got] == [15, 30, 45]
    assert CronRule("30 9 * * * 5").next_after(ts(2026, 1, 1)) == ts(2026, 1, 1, 9, 30, 5)


def test_every_second_over_fall_back() -> None:
    got = fires(CronRule("* 1 * * * *", NY), ts(2026, 11, 1, tz=NY), ts(2026, 11, 1, 3, tz=NY))
    assert len(got) == 7200
    assert got == sorted(set(got))


@pytest.mark.parametrize(
    ("alias", "expr"),
    [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@HOURLY", "0 * * * *"),
    ],
)
def test_aliases(alias: str, expr: str) -> None:
    a, b = CronRule(alias, LONDON), CronRule(expr, LONDON)
    start = ts(2026, 3, 20)
    assert fires(a, start, start + 400 * 86400) == fires(b, start, start + 400 * 86400)
    assert a.fixed_time == (alias != "@HOURLY")


def test_names_and_wraparound_ranges() -> None:
    got = fires(CronRule("0 12 * * fri-mon"), ts(2026, 3, 3), ts(2026, 3, 10))
    assert [datetime.fromtimestamp(t, UTC).weekday() for t in got] == [4, 5, 6, 0]
    got = fires(CronRule("0 0 1 nov-feb *"), ts(2026, 1, 15), ts(2027, 1, 15))
    assert [datetime.fromtimestamp(t, UTC).month for t in got] == [2, 11, 12, 1]


def test_croniter_7_readings_that_we_keep() -> None:
    # '59/15' is minute 59 only (start 59, step 15, up to 59): croniter 7 and classic cron agree
    got = fires(CronRule("59/15 * * * *"), ts(2026, 1, 1), ts(2026, 1, 1, 3))
    assert [datetime.fromtimestamp(t, UTC).minute for t in got] == [59, 59, 59]
    got = fires(CronRule("5/15 * * * *"), ts(2026, 1, 1), ts(2026, 1, 1, 1))
    assert [datetime.fromtimestamp(t, UTC).minute for t in got] == [5, 20, 35, 50]


def test_start_and_end_bound_cron_rules() -> None:
    rule = CronRule("0 * * * *", start=ts(2026, 1, 1, 5), end=ts(2026, 1, 1, 8))
    assert fires(rule, 0.0, math.inf) == [ts(2026, 1, 1, h) for h in (5, 6, 7)]


def test_jump_ahead_and_backwards_queries() -> None:
    rule = CronRule("*/5 * * * *", NY)
    a = rule.next_after(ts(2026, 6, 1))
    b = rule.next_after(ts(2030, 6, 1))  # far ahead: re-seeks
    c = rule.next_after(ts(2026, 6, 1))  # backwards: re-seeks
    assert (a, b, c) == (ts(2026, 6, 1, 0, 5), ts(2030, 6, 1, 0, 5), ts(2026, 6, 1, 0, 5))
    assert rule.next_after(ts(2026, 6, 1, 0, 7, 30)) == ts(2026, 6, 1, 0, 10)  # small skip


# ---------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tz", "needle"),
    [
        ("Mars/Olympus_Mons", "unknown time zone 'Mars/Olympus_Mons'"),
        ("../etc/passwd", "unknown time zone"),
        (timezone(timedelta(hours=2)), "fixed offsets ignore daylight saving time"),
        (5, "got 5 that is a int"),
    ],
)
def test_bad_zones(tz: object, needle: str) -> None:
    with pytest.raises(InvalidScheduleError) as info:
        CronRule("* * * * *", tz)  # type: ignore[arg-type]
    assert needle in str(info.value)


def test_zone_forms() -> None:
    assert CronRule("* * * * *").zone.key == "UTC"
    assert CronRule("* * * * *", UTC).zone.key == "UTC"  # type: ignore[arg-type]
    assert CronRule("* * * * *", ZoneInfo(NY)).zone.key == NY


# ---------------------------------------------------------------------------------------------
# Intervals
# ---------------------------------------------------------------------------------------------


def test_interval_has_no_drift() -> None:
    start, every = 1_767_225_600.123, 0.1
    rule = IntervalRule(every, start=start)
    got: list[float] = []
    t = start - 1
    for _ in range(1000):
        nxt = rule.next_after(t)
        assert nxt is not None
        got.append(nxt)
        t = nxt + 0.037  # the run "finished" a little later: the next slot must not move
    assert got == [start + k * every for k in range(1000)]


def test_interval_chain_exact() -> None:
    rule = IntervalRule(timedelta(minutes=5), start=1000.0)
    assert fires(rule, 999.0, 1000.0 + 300 * 1000) == [1000.0 + 300.0 * k for k in range(1000)]


def test_interval_start_end() -> None:
    rule = IntervalRule(10, start=100, end=150)
    assert fires(rule, 0, math.inf) == [100.0, 110.0, 120.0, 130.0, 140.0]  # end exclusive
    assert rule.next_after(150) is None
    assert rule.count_between(0, 1000) == 5
    assert rule.count_between(105, 130) == 3


def test_interval_unanchored_anchors_on_first_call() -> None:
    rule = IntervalRule(60)
    assert rule.start is None
    assert rule.next_after(1000.0) == 1060.0
    assert rule.to_spec()["start"] == 1000.0  # (rule.start narrowed to None above)
    assert rule.next_after(1090.0) == 1120.0  # anchored: no drift
    assert rule_from_spec(json.loads(json.dumps(rule.to_spec()))) == rule
    assert IntervalRule(60).anchored(5.0).next_after(5.0) == 65.0


def test_jitter_bounds_and_slot_unchanged() -> None:
    rule = IntervalRule(60, start=0, jitter=10)
    rng = random.Random(1234)
    slot = 0.0
    for _ in range(500):
        nxt = rule.next_after(slot)
        assert nxt is not None
        slot = nxt
        run_at = rule.jittered(slot, rng)
        assert slot <= run_at <= slot + 10
    assert slot == 500 * 60.0
    assert IntervalRule(60).jittered(5.0, rng) == 5.0
    cron = CronRule("0 0 * * *", jitter=300)
    assert 0 <= cron.jittered(86400.0, random.Random(7)) - 86400.0 <= 300


@pytest.mark.parametrize(
    "every", [0, -1, math.nan, math.inf, timedelta(0), timedelta(seconds=-5), "60", True, None]
)
def test_bad_every(every: object) -> None:
    with pytest.raises(InvalidScheduleError):
        IntervalRule(every)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"jitter": -1},
        {"jitter": math.nan},
        {"start": 10, "end": 10},
        {"start": 20, "end": 10},
        {"start": math.inf},
        {"start": datetime(2026, 1, 1)},  # naive
    ],
)
def test_bad_interval_options(kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidScheduleError):
        IntervalRule(60, **kwargs)  # type: ignore[arg-type]


def test_parse_every() -> None:
    assert parse_every(timedelta(minutes=2)) == 120.0
    assert parse_every(1.5) == 1.5
    with pytest.raises(InvalidScheduleError, match="positive"):
        parse_every(0)


def test_aware_datetime_start() -> None:
    rule = IntervalRule(60, start=datetime(2026, 1, 1, tzinfo=ZoneInfo(NY)))
    assert rule.start == ts(2026, 1, 1, tz=NY)


# ---------------------------------------------------------------------------------------------
# Specs, make_rule, describe, protocol
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "rule",
    [
        CronRule("30 2 * * *", NY, jitter=5),
        CronRule("* * * * * */10", start=100.0, end=1e9),
        IntervalRule(300, start=1.5, end=1e6, jitter=2),
    ],
    ids=["cron", "cron-seconds", "interval"],
)
def test_spec_round_trip(rule: CronRule | IntervalRule) -> None:
    assert isinstance(rule, Rule)
    back = rule_from_spec(json.loads(json.dumps(rule.to_spec())))
    assert back == rule
    assert back.next_after(1e9 + 7) == rule.next_after(1e9 + 7)
    assert rule.describe()


@pytest.mark.parametrize(
    "spec",
    [
        {"kind": "weekly"},
        {"kind": "cron", "expr": 5, "tz": None},
        {"kind": "interval", "every": "5"},
        {"kind": "interval", "every": 5, "start": "x"},
        {"kind": "cron", "expr": "0 0 30 2 *", "tz": "UTC"},
    ],
)
def test_bad_specs(spec: dict[str, object]) -> None:
    with pytest.raises(InvalidScheduleError):
        rule_from_spec(spec)


def test_make_rule() -> None:
    assert isinstance(make_rule(cron="@daily", tz=NY), CronRule)
    rule = make_rule(every=timedelta(seconds=30), start=1000.0)
    assert isinstance(rule, IntervalRule)
    assert rule.next_after(1000.0) == 1030.0
    with pytest.raises(InvalidScheduleError, match="exactly one"):
        make_rule()
    with pytest.raises(InvalidScheduleError, match="exactly one"):
        make_rule(cron="* * * * *", every=5)
    with pytest.raises(InvalidScheduleError, match="does not apply"):
        make_rule(every=5, tz=NY)


def test_describe() -> None:
    assert (
        CronRule("30 2 * * *", NY).describe()
        == "cron '30 2 * * *' in America/New_York (fixed-time)"
    )
    assert IntervalRule(300, start=0).describe() == "every 300s from 1970-01-01T00:00:00Z"


def test_policy_values() -> None:
    assert [m.value for m in Misfire] == ["run_once", "run_all", "skip"]
    assert [o.value for o in Overlap] == ["skip", "queue", "allow"]
    assert Misfire.SKIP.default_grace == DEFAULT_SKIP_GRACE
    assert Misfire.RUN_ONCE.default_grace is None


# ---------------------------------------------------------------------------------------------
# Misfires
# ---------------------------------------------------------------------------------------------

# a 10-interval outage: the slots 1..10 periods after last_slot are due at now = 10.5 periods


def _outage_rule(kind: str) -> tuple[Rule, float, float, list[float]]:
    if kind == "interval":
        return IntervalRule(100, start=0), 0.0, 1050.0, [100.0 * k for k in range(1, 11)]
    rule = CronRule("*/5 * * * *")  # every 5 minutes, slots every 300 s
    return rule, 0.0, 3150.0, [300.0 * k for k in range(1, 11)]


@pytest.mark.parametrize("kind", ["interval", "cron"])
@pytest.mark.parametrize(
    ("policy", "grace", "expect_run"),
    [
        (Misfire.RUN_ONCE, None, [9]),
        (Misfire.RUN_ONCE, 1.0, [9]),  # grace does not stop RUN_ONCE
        (Misfire.RUN_ALL, None, [5, 6, 7, 8, 9]),  # capped at max_runs=5, most recent kept
        (Misfire.RUN_ALL, "3.5 slots", [6, 7, 8, 9]),  # older than grace: dropped
        (Misfire.SKIP, None, [9]),
        (Misfire.SKIP, "0.4 slots", []),  # latest slot is 0.5 slots late: skipped
        (Misfire.SKIP, "0.6 slots", [9]),
    ],
)
def test_misfire_plans_over_ten_interval_outage(
    kind: str, policy: Misfire, grace: float | str | None, expect_run: list[int]
) -> None:
    rule, last, now, slots = _outage_rule(kind)
    period = slots[1] - slots[0]
    g = float(grace.split()[0]) * period if isinstance(grace, str) else grace
    plan = plan_misfires(rule, last, now, policy=policy, grace=g, max_runs=5)
    assert isinstance(plan, MisfirePlan)
    assert plan.run == tuple(slots[i] for i in expect_run)
    assert plan.due == 10
    assert plan.due_exact
    assert plan.skipped == 10 - len(expect_run)
    assert plan.next_slot == slots[-1] + period


@pytest.mark.parametrize("kind", ["interval", "cron"])
def test_misfire_on_time_slot_runs(kind: str) -> None:
    rule, _, _, slots = _outage_rule(kind)
    for policy in Misfire:
        plan = plan_misfires(
            rule, slots[0], slots[1] + 0.002, policy=policy, grace=policy.default_grace
        )
        assert plan.run == (slots[1],)
        assert plan.skipped == 0
        nothing = plan_misfires(rule, slots[1], slots[1] + 1, policy=policy, grace=None)
        assert nothing.run == ()
        assert nothing.due == 0
        assert nothing.next_slot == slots[2]


class CountingRule:
    """Wraps a rule and counts evaluations (to assert on work, not on timing)."""

    def __init__(self, rule: Rule) -> None:
        self.rule = rule
        self.calls = 0

    def next_after(self, t: float) -> float | None:
        self.calls += 1
        return self.rule.next_after(t)

    def jittered(self, slot: float, rng: random.Random) -> float:
        return self.rule.jittered(slot, rng)

    def describe(self) -> str:
        return self.rule.describe()

    def to_spec(self) -> dict[str, object]:
        return self.rule.to_spec()


@pytest.mark.parametrize("policy", list(Misfire))
def test_long_outage_is_cheap(policy: Misfire) -> None:
    month = 30 * 86400.0
    last, now = ts(2026, 1, 1), ts(2026, 1, 1) + month + 0.5
    counting = CountingRule(CronRule("* * * * * *"))  # every second: 2.6 million due slots
    plan = plan_misfires(counting, last, now, policy=policy, grace=None, max_runs=10)
    assert counting.calls < 1000
    assert plan.due >= 256
    assert not plan.due_exact
    assert plan.next_slot == math.floor(now) + 1
    latest = float(math.floor(now))
    if policy is Misfire.RUN_ALL:
        assert plan.run == tuple(latest - 9 + k for k in range(10))
    else:
        assert plan.run == (latest,)
    interval = IntervalRule(1, start=last)
    plan = plan_misfires(interval, last, now, policy=policy, grace=None, max_runs=10)
    assert plan.iterations == 1
    assert plan.due == int(month)
    assert plan.due_exact


def test_sparse_rule_outage_finds_latest_slot() -> None:
    rule = CronRule("0 3 1 * *", NY)  # monthly
    plan = plan_misfires(rule, ts(2020, 1, 1), ts(2026, 5, 17), policy=Misfire.RUN_ONCE, grace=None)
    assert plan.run == (ts(2026, 5, 1, 3, tz=NY),)
    assert plan.due == 77  # 2020-01 .. 2026-05
    assert plan.due_exact
    assert plan.next_slot == ts(2026, 6, 1, 3, tz=NY)


def test_plan_misfire_validation() -> None:
    rule = IntervalRule(10, start=0)
    with pytest.raises(InvalidScheduleError):
        plan_misfires(rule, 0, 100, policy=Misfire.SKIP, grace=-1)
    with pytest.raises(InvalidScheduleError):
        plan_misfires(rule, 0, 100, policy=Misfire.RUN_ALL, grace=None, max_runs=0)
    with pytest.raises(InvalidScheduleError):
        plan_misfires(rule, 0, math.nan, policy=Misfire.RUN_ALL, grace=None)


# ---------------------------------------------------------------------------------------------
# Property tests: every fire matches the expression in local time, strictly increasing
# ---------------------------------------------------------------------------------------------

FIELD_BOUNDS = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 6)]


@st.composite
def field_text(draw: st.DrawFn, index: int) -> tuple[str, set[int]]:
    low, high = FIELD_BOUNDS[index]
    kind = draw(st.sampled_from(["star", "value", "range", "step", "list"]))
    if kind == "star":
        return "*", set(range(low, high + 1))
    if kind == "value":
        v = draw(st.integers(low, high))
        return str(v), {v}
    if kind == "range":
        a = draw(st.integers(low, high - 1))
        b = draw(st.integers(a + 1, high))
        return f"{a}-{b}", set(range(a, b + 1))
    if kind == "step":
        step = draw(st.integers(1, max(1, (high - low) // 2)))
        if index == 4 or draw(st.booleans()):
            return f"*/{step}", set(range(low, high + 1, step))
        a = draw(st.integers(low, high))
        return f"{a}/{step}", set(range(a, high + 1, step))
    values = sorted(draw(st.sets(st.integers(low, high), min_size=2, max_size=4)))
    return ",".join(map(str, values)), set(values)


@st.composite
def expressions(draw: st.DrawFn) -> tuple[str, list[set[int]], list[str]]:
    parts = [draw(field_text(i)) for i in range(5)]
    texts = [p[0] for p in parts]
    sets = [p[1] for p in parts]
    if draw(st.booleans()):  # keep most expressions sparse enough to be interesting
        minute = draw(st.integers(0, 59))
        texts[0], sets[0] = str(minute), {minute}
    return " ".join(texts), sets, texts


ZONES = [
    "UTC",
    NY,
    LONDON,
    "Australia/Lord_Howe",
    "Asia/Kolkata",
    "America/Santiago",
    "Europe/Dublin",
]


def matches(wall: datetime, sets: list[set[int]], texts: list[str]) -> bool:
    if wall.minute not in sets[0] or wall.hour not in sets[1] or wall.month not in sets[3]:
        return False
    dom_ok = wall.day in sets[2]
    dow_ok = (wall.isoweekday() % 7) in sets[4]
    if texts[2].startswith("*") or texts[4].startswith("*"):
        return dom_ok and dow_ok
    return dom_ok or dow_ok


def gap_walls(t: float, zone: ZoneInfo) -> Iterator[datetime]:
    """If ``t`` is the first instant after a gap, yield the nonexistent wall minutes."""
    before = datetime.fromtimestamp(t - 1, zone)
    after = datetime.fromtimestamp(t, zone)
    jump = (after.replace(tzinfo=None) - before.replace(tzinfo=None)).total_seconds()
    if jump <= 1:
        return
    wall = before.replace(tzinfo=None, second=0) + timedelta(minutes=1)
    while wall < after.replace(tzinfo=None):
        yield wall
        wall += timedelta(minutes=1)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    expr=expressions(),
    zone_name=st.sampled_from(ZONES),
    start=st.floats(1.6e9, 1.9e9),
    count=st.integers(1, 30),
)
def test_property_fires_match_expression(
    expr: tuple[str, list[set[int]], list[str]], zone_name: str, start: float, count: int
) -> None:
    text, sets, texts = expr
    try:
        rule = CronRule(text, zone_name)
    except InvalidScheduleError:
        assume(False)
        raise
    zone = ZoneInfo(zone_name)
    fixed = not texts[0].startswith("*") and not texts[1].startswith("*")
    t = start
    for _ in range(count):
        nxt = rule.next_after(t)
        assert nxt is not None
        assert nxt > t
        wall = datetime.fromtimestamp(nxt, zone)
        naive = wall.replace(tzinfo=None)
        if matches(naive, sets, texts):
            if fixed:  # a fixed-time job runs in the first pass of a repeated interval only
                first_pass = naive.replace(tzinfo=zone, fold=0).timestamp()
                assert first_pass == nxt, (text, zone_name, wall)
        else:  # only a fixed-time job may fire off-pattern: at the end of a gap it fell into
            assert fixed, (text, zone_name, wall)
            assert any(matches(w, sets, texts) for w in gap_walls(nxt, zone)), (text, wall)
        # a fresh rule asked from the same instant agrees with the kept iterator
        assert CronRule(text, zone_name).next_after(t) == nxt
        t = nxt


@settings(max_examples=60, deadline=None)
@given(
    every=st.floats(0.001, 1e6),
    start=st.floats(-1e9, 2e9),
    k=st.integers(0, 10**6),
    frac=st.floats(0, 1, exclude_max=True),
)
def test_property_interval_next_after(every: float, start: float, k: int, frac: float) -> None:
    rule = IntervalRule(every, start=start)
    t = start + (k + frac) * every
    nxt = rule.next_after(t)
    assert nxt is not None
    assert nxt > t
    k2 = rule.index_after(t)
    assert nxt == start + k2 * every
    assert k2 == 0 or start + (k2 - 1) * every <= t


def test_next_after_an_instant_a_hair_before_a_transition() -> None:
    """fromtimestamp() rounds to microseconds: an instant 1 ulp before a spring-forward must
    still see standard time, so the skipped 02:30 fires at the transition itself."""
    import math

    from timewheel.rules import CronRule

    rule = CronRule("30 2 * * *", "America/New_York")
    transition = datetime(2026, 3, 8, 7, 0, tzinfo=timezone.utc).timestamp()
    assert rule.next_after(math.nextafter(transition, -math.inf)) == transition
    assert rule.next_after(transition - 1e-6) == transition


@pytest.mark.parametrize("policy", list(Misfire))
@pytest.mark.parametrize("grace", [None, 0.0, 30.0, 90.0])
@pytest.mark.parametrize("late", [0.0, 29.0, 60.0, 61.0, 150.0, 3600.0 * 5])
def test_plan_with_a_known_first_slot_is_the_same_plan(
    policy: Misfire, grace: float | None, late: float
) -> None:
    """The on-time shortcut (one slot due, the caller passing it as ``first``) decides exactly
    as the full search does: the same runs, count and next slot, for every policy and grace."""
    slot = 1_767_225_600.0  # a midnight; the rule fires every minute
    last = math.nextafter(slot, -math.inf)
    now = slot + late
    full = plan_misfires(CronRule("* * * * *"), last, now, policy=policy, grace=grace, max_runs=3)
    known = plan_misfires(
        CronRule("* * * * *"), last, now, policy=policy, grace=grace, max_runs=3, first=slot
    )
    assert (known.run, known.due, known.due_exact, known.next_slot) == (
        full.run,
        full.due,
        full.due_exact,
        full.next_slot,
    )
    if late < 60.0:  # one slot due: as the Misfire docs say, grace bounds SKIP and RUN_ALL only
        expired = policy is not Misfire.RUN_ONCE and grace is not None and late > grace
        assert known.run == (() if expired else (slot,))
        assert (known.due, known.next_slot) == (1, slot + 60.0)
        assert known.iterations == 1  # one step on from the known slot
