"""Differential tests: CronRule against the independent ``cronsim`` package.

cronsim (used by Healthchecks.io) implements Debian/Vixie cron semantics, including the DST rules
we follow for 5-field expressions: a fixed-time job (minute and hour fields do not start with
``*``) fires once after a gap and once in a repeated interval; a wildcard job fires at every
matching instant. Differences we keep, each pinned by a test below:

* **Seconds position.** timewheel (like croniter) puts the seconds field last; cronsim puts it
  first. The corpus converts.
* **DST for 6-field expressions.** cronsim applies its fixed-time DST handling to 5-field
  expressions only; a 6-field fixed-time job in cronsim never fires on a spring-forward day and
  fires twice on a fall-back day. timewheel applies the same rule to 5 and 6 fields.
* **Wrap-around ranges** (``FRI-MON``, ``22-2``): accepted by croniter and timewheel, refused by
  cronsim (and Vixie cron); compared against the equivalent explicit list.
* **Refused spellings.** ``0-0``/``JAN-JAN`` (croniter 7: every value; cronsim: one value) and a
  day-of-week ``N/step`` that reaches 7 (``6/1``: croniter 7 Saturday only, cronsim Saturday and
  Sunday) are refused by timewheel, so no schedule depends on which reading wins.
* **Day fields.** When neither day field starts with ``*`` a day matches if either matches,
  ``#n`` and ``nL`` days included (``0 0 15 * fri#2``: the 15th and every second Friday), and a
  list item ``*`` makes its field every value (``*,sat#3``): cronsim and timewheel agree, and
  a grid of day-of-month, month and day-of-week spellings is compared below.
* ``59/15`` is minute 59 only in both (croniter before 7.0 read it as every 15 minutes).
* **cronsim bugs in half-hour DST zones** (Australia/Lord_Howe): for wildcard jobs cronsim jumps
  minutes and hours in UTC, so it skips the second pass of ``30 * * * *`` in the repeated
  01:30-02:00 and skips 02:00+10:30 (which exists once) for ``0 */2 * * *``. Those two cases are
  checked against a brute-force scan of every UTC minute instead.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from cronsim import CronSim, CronSimError

from timewheel.errors import InvalidScheduleError
from timewheel.rules import CronRule

UTC = timezone.utc
ZONES = ["UTC", "America/New_York", "Europe/London", "Australia/Lord_Howe", "Asia/Kolkata"]

CORPUS_5 = [
    "* * * * *",
    "*/7 * * * *",
    "0 * * * *",
    "30 * * * *",
    "15,45 * * * *",
    "0 0 * * *",
    "30 2 * * *",
    "30 1 * * *",
    "0,30 2 * * *",
    "15 2 * * *",
    "45 1 * * *",
    "0 1-3 * * *",
    "*/20 1 * * *",
    "0 */2 * * *",
    "5 4 * * sun",
    "0 0 1 * *",
    "0 0 31 * *",
    "0 0 29 2 *",
    "0 0 13 * 5",
    "0 0 */2 * 1",
    "0 9 * * 1-5",
    "59/15 * * * *",
    "5/15 * * * *",
    "0 0 L * *",
    "0 9 * * 1#2",
    "0 9 * * 5L",
    "0 12 * jan,jul *",
    "@daily",
    "@hourly",
    # a restricted day-of-month ORed with '#'/'L' days, on and around transition days
    "0 0 15 * fri#2",
    "0 0 13 * 5L",
    "30 2 8 * 0#2",
    "30 1 1 * 0#1",
    "30 1 25 * 0L",
    # a list item '*' is the whole field
    "*,5 * * * *",
    "0 0 13 * 1,*",
    "0 0 * * *,sat#3",
]

ALIASES = {"@daily": "0 0 * * *", "@hourly": "0 * * * *"}


def transitions(zone: ZoneInfo, year: int) -> list[float]:
    """UTC instants where the zone's offset changes during ``year``."""
    out: list[float] = []
    t = datetime(year, 1, 1, tzinfo=UTC).timestamp()
    end = datetime(year + 1, 1, 1, tzinfo=UTC).timestamp()
    prev = datetime.fromtimestamp(t, zone).utcoffset()
    while t < end:
        t2 = t + 3600
        off = datetime.fromtimestamp(t2, zone).utcoffset()
        if off != prev:
            lo, hi = t, t2
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if datetime.fromtimestamp(mid, zone).utcoffset() == off:
                    hi = mid
                else:
                    lo = mid
            out.append(hi)
            prev = off
        t = t2
    return out


def oracle(expr: str, zone: ZoneInfo, after: float, n: int) -> list[float]:
    it = CronSim(ALIASES.get(expr, expr), datetime.fromtimestamp(after, zone))
    return [next(it).timestamp() for _ in range(n)]


def ours(rule: CronRule, after: float, n: int) -> list[float]:
    out: list[float] = []
    t = after
    for _ in range(n):
        nxt = rule.next_after(t)
        assert nxt is not None
        out.append(nxt)
        t = nxt
    return out


def starts(zone_name: str) -> list[float]:
    zone = ZoneInfo(zone_name)
    points = [datetime(2026, 6, 15, 12, tzinfo=UTC).timestamp()]
    for t in transitions(zone, 2026):
        points += [t - 2 * 3600, t - 86400 - 1800]  # never inside a repeated interval
    return points


# (expr, zone) -> brute-force matcher on the local wall time, used instead of cronsim
CRONSIM_BUGS = {
    ("30 * * * *", "Australia/Lord_Howe"): lambda d: d.minute == 30,
    ("0 */2 * * *", "Australia/Lord_Howe"): lambda d: d.minute == 0 and d.hour % 2 == 0,
}


def brute_force(
    match: Callable[[datetime], bool], zone: ZoneInfo, after: float, n: int
) -> list[float]:
    """Every UTC minute whose local wall time matches (the wildcard-job definition)."""
    out: list[float] = []
    t = (after // 60 + 1) * 60
    while len(out) < n:
        if match(datetime.fromtimestamp(t, zone)):
            out.append(t)
        t += 60
    return out


@pytest.mark.parametrize("zone_name", ZONES)
@pytest.mark.parametrize("expr", CORPUS_5)
def test_matches_cronsim(expr: str, zone_name: str) -> None:
    zone = ZoneInfo(zone_name)
    rule = CronRule(expr, zone_name)
    n = 100 if expr.startswith("*") else 40
    bug = CRONSIM_BUGS.get((expr, zone_name))
    if bug is not None:
        for start in starts(zone_name):
            assert ours(rule, start, n) == brute_force(bug, zone, start, n)
        start = datetime(2026, 4, 4, 12, tzinfo=UTC).timestamp()  # before the April fall-back
        missed = set(ours(rule, start, 21)) - set(oracle(expr, zone, start, 20))
        assert len(missed) == 1  # cronsim skips one existing local time
        return
    for start in starts(zone_name):
        expected = oracle(expr, zone, start, n)
        got = ours(rule, start, n)
        assert got == expected, (expr, zone_name, datetime.fromtimestamp(start, zone))


@pytest.mark.parametrize("zone_name", ["UTC", "Asia/Kolkata", "America/New_York"])
@pytest.mark.parametrize(
    "expr", ["* * * * * */15", "30 9 * * * 5", "* 1 * * * 0,30", "*/5 * * * * 10-20/5"]
)
def test_six_fields_match_cronsim_outside_dst(expr: str, zone_name: str) -> None:
    zone = ZoneInfo(zone_name)
    fields = expr.split()
    seconds_first = " ".join([fields[5], *fields[:5]])
    start = datetime(2026, 6, 15, 8, tzinfo=UTC).timestamp()
    assert ours(CronRule(expr, zone_name), start, 200) == oracle(seconds_first, zone, start, 200)


def test_six_field_fixed_job_differs_from_cronsim_on_dst_days() -> None:
    ny = ZoneInfo("America/New_York")
    spring = datetime(2026, 3, 8, tzinfo=ny).timestamp()
    ours_fire = CronRule("30 2 * * * 0", "America/New_York").next_after(spring)
    theirs = next(CronSim("0 30 2 * * *", datetime(2026, 3, 8, tzinfo=ny)))
    assert ours_fire == datetime(2026, 3, 8, 3, tzinfo=ny).timestamp()  # after the gap
    assert theirs.date().isoformat() == "2026-03-09"  # cronsim: no run on the 8th
    fall = datetime(2026, 11, 1, tzinfo=ny).timestamp()
    got = ours(CronRule("30 1 * * * 0", "America/New_York"), fall, 2)
    assert [datetime.fromtimestamp(t, ny).day for t in got] == [1, 2]  # once on the 1st
    it = CronSim("0 30 1 * * *", datetime(2026, 11, 1, tzinfo=ny))
    assert [next(it).day for _ in range(2)] == [1, 1]  # cronsim: both passes


@pytest.mark.parametrize(
    ("ours_expr", "explicit"),
    [("0 12 * * fri-mon", "0 12 * * 0,1,5,6"), ("22-2 * * * *", "0,1,2,22-59 * * * *")],
)
def test_wraparound_ranges_equal_explicit_lists(ours_expr: str, explicit: str) -> None:
    with pytest.raises(CronSimError):
        CronSim(ours_expr.upper(), datetime(2026, 1, 1, tzinfo=UTC))
    start = datetime(2026, 3, 1, tzinfo=UTC).timestamp()
    expected = oracle(explicit, ZoneInfo("UTC"), start, 100)
    assert ours(CronRule(ours_expr), start, 100) == expected


@pytest.mark.parametrize(
    ("expr", "cronsim_reading"),
    [("0-0 * * * *", [0]), ("* * * * 6/1", [5, 6]), ("* * * * 1/2", [0, 2, 4, 6])],
)
def test_spellings_read_differently_are_refused(expr: str, cronsim_reading: list[int]) -> None:
    with pytest.raises(InvalidScheduleError):
        CronRule(expr)
    # what cronsim does with them, for the record (minutes for 0-0; weekdays, Monday=0, else)
    it = CronSim(expr, datetime(2026, 3, 2, tzinfo=UTC))  # a Monday
    got = [next(it) for _ in range(60 * 24 * 7 if "0-0" not in expr else 3)]
    if "0-0" in expr:
        assert sorted({d.minute for d in got}) == cronsim_reading
    else:
        assert sorted({d.weekday() for d in got}) == cronsim_reading


DAY_OF_MONTH_FIELDS = ["*", "13", "30", "31", "L", "1,15", "15,L", "*/2", "1-7"]
MONTH_FIELDS = ["*", "2", "11"]
DAY_OF_WEEK_FIELDS = ["*", "5", "1-5", "5#2", "5L", "1#1,5L", "*,6#3", "1,*", "0#5", "*/2"]


@pytest.mark.parametrize("day_of_month", DAY_OF_MONTH_FIELDS)
def test_day_fields_match_cronsim(day_of_month: str) -> None:
    """Every pairing of the day fields (ANDed or ORed, '#n', 'nL', 'L', '*' items) in UTC."""
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for month in MONTH_FIELDS:
        for day_of_week in DAY_OF_WEEK_FIELDS:
            expr = f"0 12 {day_of_month} {month} {day_of_week}"
            try:
                rule = CronRule(expr)
            except InvalidScheduleError:  # never fires (30 February): cronsim refuses it too
                with pytest.raises(CronSimError):
                    CronSim(expr, start)
                continue
            expected = oracle(expr, ZoneInfo("UTC"), start.timestamp(), 20)
            assert ours(rule, start.timestamp(), 20) == expected, expr


def test_random_reseeks_match_cronsim() -> None:
    import random

    rng = random.Random(42)
    for _ in range(300):
        expr = rng.choice(CORPUS_5)
        zone_name = rng.choice(ZONES)
        zone = ZoneInfo(zone_name)
        t = float(rng.randrange(1_750_000_000, 1_850_000_000))
        local = datetime.fromtimestamp(t, zone)
        if local.fold or datetime.fromtimestamp(t + 7200, zone).utcoffset() != local.utcoffset():
            continue  # cronsim cannot start inside a repeated interval
        rule = CronRule(expr, zone_name)
        assert rule.next_after(t) == oracle(expr, zone, t, 1)[0], (expr, zone_name, local)
        assert rule.next_after(t + timedelta(days=3).total_seconds()) is not None
