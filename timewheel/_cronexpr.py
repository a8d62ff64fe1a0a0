"""Cron expressions: parsing, validation, and the croniter expressions that evaluate them.

:func:`parse_cron` turns the text a user wrote into a :class:`CronExpression`: the fields as
classic cron reads them, whether the job is a Vixie *fixed-time* job, and one or two expressions
for croniter whose matches, together, are the schedule. :class:`~timewheel.rules.CronRule` owns
the time zones and DST; this module owns the text. It imports nothing of the package but
:mod:`timewheel.errors`.

What classic cron (Vixie, cronsim) and croniter 7 read differently, and what is done about it:

* A list item ``*`` makes the field every value (``*,5``, ``1,*``): croniter 7 agrees for the
  time fields but lets it change how day-of-month and day-of-week combine, so such a field is
  handed to croniter as ``*``.
* Day-of-month and day-of-week combine as in Vixie cron: if either field starts with ``*`` a day
  must match both, otherwise either. croniter 7 ANDs ``#n`` and ``nL`` day-of-week items with a
  restricted day-of-month (and mishandles some); such an expression is evaluated as two croniter
  expressions, one per day field, whose matches are merged.
* ``5-5`` is every value for croniter 7 and one value in classic cron, and ``6/1`` in the
  day-of-week field is Saturday for croniter 7 but Saturday and Sunday in classic cron: every
  plain field's croniter expansion is compared with the classic reading, and an expression whose
  readings differ is refused.
* Spellings of other cron dialects (``?``, ``W``, ``H``, ``R``, ``L-2``, ``MON-FRI#1``,
  ``CRON_TZ=``, a year field, seconds first) and non-ASCII characters are refused with a message
  that names the problem and the way out.
"""

from __future__ import annotations

import calendar
import dataclasses
import functools
import re
import unicodedata
from collections.abc import Mapping, Sequence

from croniter import CroniterBadDateError, CroniterError, croniter

from timewheel.errors import InvalidScheduleError

__all__ = ["CronExpression", "parse_cron"]

_MONTH_NAMES = {
    name: number
    for number, name in enumerate(
        ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"),
        start=1,
    )
}
_DOW_NAMES = {
    name: number for number, name in enumerate(("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"))
}
_DAY_NAMES = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")

_ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


@dataclasses.dataclass(frozen=True, slots=True)
class _Field:
    name: str
    low: int
    high: int  # classic cron's upper bound (day-of-week: 7, an alias of Sunday)
    names: Mapping[str, int]


_MINUTE = _Field("minute", 0, 59, {})
_HOUR = _Field("hour", 0, 23, {})
_DOM = _Field("day-of-month", 1, 31, {})
_MONTH = _Field("month", 1, 12, _MONTH_NAMES)
_DOW = _Field("day-of-week", 0, 7, _DOW_NAMES)
_SECOND = _Field("second", 0, 59, {})
_FIELDS_5 = (_MINUTE, _HOUR, _DOM, _MONTH, _DOW)
_FIELDS_6 = (*_FIELDS_5, _SECOND)
_LAYOUT_5 = "minute hour day-of-month month day-of-week"
_LAYOUT_6 = "minute hour day-of-month month day-of-week second"
_DOM_INDEX, _MONTH_INDEX, _DOW_INDEX = 2, 3, 4  # positions in an expression

_ITEM_RE = re.compile(r"^(?:(\*)|([0-9A-Z]+)(?:-([0-9A-Z]+))?)(?:/([0-9]+))?$")
_NTH_RE = re.compile(r"^([0-9A-Z]+)#([0-9]+)$")
_NTH_RANGE_RE = re.compile(r"^([0-9A-Z]+)-([0-9A-Z]+)#([0-9]+)$")
_LAST_DOW_RE = re.compile(r"^([0-9A-Z]+)L$")
_LEADING_LAST_DOW_RE = re.compile(r"^L([0-9A-Z]+)$")
_LAST_OFFSET_RE = re.compile(r"^L-([0-9]+)$")
_RANGE_TO_LAST_RE = re.compile(r"^([0-9]+)-L$")
_YEAR_RE = re.compile(r"^(?:19|2[0-9])[0-9]{2}(?:[-,/][0-9]+)*$")
_ZONE_PREFIX_RE = re.compile(r"^(?:CRON_TZ|TZ)=(\S*)\s*(.*)$", re.IGNORECASE | re.DOTALL)


class _FieldError(Exception):
    """A field failed to parse; carries the reason, the scheduler error names the field."""


@dataclasses.dataclass(frozen=True, slots=True)
class _ParsedField:
    text: str  # croniter spelling
    values: frozenset[int]  # classic-cron reading of the plain items (dow 7 folded to 0)
    special: bool  # contains L or # items (not compared with croniter's expansion)
    wrapped: bool  # contains a wrap-around range such as FRI-MON
    every: bool  # a list item '*': the field is every value (its text is then '*')


@dataclasses.dataclass(frozen=True, slots=True)
class CronExpression:
    """A validated cron expression (from :func:`parse_cron`).

    ``source`` is the expression as written. ``fixed`` is True for a Vixie fixed-time job
    (neither the minute nor the hour field starts with ``*``). ``croniter_expressions`` are one
    or two expressions for croniter, in its spelling, whose matches together are exactly the
    schedule's local times (two when day-of-month and day-of-week are ORed and croniter cannot
    OR them itself); each can fire.
    """

    source: str
    fields: tuple[_ParsedField, ...]
    raw: tuple[str, ...]  # the field texts as written (after alias expansion)
    fixed: bool
    croniter_expressions: tuple[str, ...]

    @property
    def has_seconds(self) -> bool:
        """True for a six-field expression (seconds last)."""
        return len(self.fields) == 6


def parse_cron(expr: object) -> CronExpression:
    """Validate a cron expression and return its parsed form (see the module docstring).

    Raises :class:`~timewheel.errors.InvalidScheduleError` naming the field, the reason and the
    way out. Parsed forms are cached by expression: 100,000 schedules at ``0 0 * * *`` parse it
    once.
    """
    if not isinstance(expr, str):
        raise InvalidScheduleError(
            f"cron expression must be a str (got {expr!r} that is a {type(expr).__name__})"
        )
    return _parse_cached(expr)


# --------------------------------------------------------------------------------------------
# Items and fields
# --------------------------------------------------------------------------------------------


def _value(field: _Field, token: str) -> int:
    if token.isdigit():
        number = int(token)
    elif token in field.names:
        number = field.names[token]
    elif field.names:
        raise _FieldError(
            f"{token!r} is neither a number nor a {field.name} name "
            f"({', '.join(sorted(field.names, key=field.names.__getitem__))})"
        )
    else:
        raise _FieldError(f"{token!r} is not a number")
    if not field.low <= number <= field.high:
        raise _FieldError(f"value {number} is out of range {field.low}-{field.high}")
    return number


def _dialect_item(field: _Field, item: str) -> None:
    """Refuse the items of other cron dialects, naming the way out."""
    if item == "?":
        raise _FieldError("'?' is not supported; write '*'")
    if item.startswith("H"):
        raise _FieldError(
            "hashed values ('H', as in Jenkins) are not supported: write a value, or keep a "
            "round value and pass jitter= (seconds) to spread the runs"
        )
    if item.startswith("R"):
        raise _FieldError(
            "random values ('R') are not supported: write a value, or keep a round value and "
            "pass jitter= (seconds) to spread the runs"
        )
    if field is _DOM and "W" in item:
        raise _FieldError(f"{item!r}: 'W' (nearest weekday) is not supported")


def _last_day_of_month(item: str) -> tuple[str, set[int], bool, bool]:
    """A day-of-month item containing 'L': only 'L' itself is supported."""
    if item == "L":
        return "L", set(), True, False
    offset = _LAST_OFFSET_RE.match(item)
    if offset:
        raise _FieldError(
            f"{item!r}: counting days back from the last day of the month (Quartz's 'L-n') is "
            "not supported; 'L' alone is the last day of the month"
        )
    to_last = _RANGE_TO_LAST_RE.match(item)
    if to_last:
        raise _FieldError(
            f"{item!r}: 'L' (the last day of the month) cannot end a range; write "
            f"'{to_last.group(1)}-31' (a month without a day stops at its last day)"
        )
    raise _FieldError(
        f"{item!r}: 'L' (the last day of the month) stands alone: it cannot be part of a range "
        "or take a step; write it as its own list item, e.g. '1-15,L'"
    )


def _day_of_week_special(item: str) -> tuple[str, set[int], bool, bool] | None:
    """Parse a day-of-week '#n' or 'nL' item; None for a plain item."""
    if "#" in item:
        nth = _NTH_RE.match(item)
        if nth:
            day = _value(_DOW, nth.group(1)) % 7
            week = int(nth.group(2))
            if not 1 <= week <= 5:
                raise _FieldError(f"{item!r}: the week number after '#' must be 1-5")
            return f"{day}#{week}", set(), True, False
        days = _NTH_RANGE_RE.match(item)
        if days:
            first_day, last_day = _value(_DOW, days.group(1)), _value(_DOW, days.group(2))
            week_text = days.group(3)
            if first_day <= last_day:
                span = list(range(first_day, last_day + 1))
            else:  # a wrap-around range such as FRI-MON
                span = [*range(first_day, 7), *range(last_day + 1)]
            listed = ",".join(f"{day % 7}#{week_text}" for day in span)
            raise _FieldError(
                f"{item!r}: '#' takes one day ('MON#1' is the first Monday of the month), not a "
                f"range; list the days: '{listed}'"
            )
        raise _FieldError(
            f"{item!r}: '#' takes one day and a week number 1-5, e.g. 'MON#1' (the first Monday "
            "of the month)"
        )
    if "L" not in item:
        return None
    last = _LAST_DOW_RE.match(item)
    if last:
        day = _value(_DOW, last.group(1)) % 7
        return f"L{day}", set(), True, False
    leading = _LEADING_LAST_DOW_RE.match(item)
    if leading:
        day = _value(_DOW, leading.group(1)) % 7
        raise _FieldError(
            f"{item!r}: write the last {_DAY_NAMES[day]} of the month as '{day}L' (the day, "
            "then 'L')"
        )
    if item == "L":
        raise _FieldError(
            "'L' alone is not a day of the week: write '5L' for the last Friday of the month, "
            "or 'SAT' for every Saturday"
        )
    raise _FieldError(
        f"{item!r}: 'L' takes one day ('5L' is the last Friday of the month), not a range or "
        "a step; list the days, e.g. '1L,5L' for the last Monday and the last Friday"
    )


def _parse_item(field: _Field, item: str) -> tuple[str, set[int], bool, bool]:
    """Parse one comma-separated item; return (croniter text, values, special, wrapped)."""
    _dialect_item(field, item)
    if field is _DOM and "L" in item:
        return _last_day_of_month(item)
    if field is _DOW:
        special = _day_of_week_special(item)
        if special is not None:
            return special
    m = _ITEM_RE.match(item)
    if not m:
        raise _FieldError(
            f"{item!r} is not a value, a range 'a-b', a step '*/n', 'a/n' or 'a-b/n', or a list"
        )
    star, first, second, step_text = m.groups()
    step = 1
    if step_text is not None:
        step = int(step_text)
        if step < 1:
            raise _FieldError(f"step {step} must be >= 1")
        if step > field.high - field.low:
            raise _FieldError(
                f"step {step} exceeds the {field.name} range {field.low}-{field.high}, so it "
                "would fire only at the start of the range; cron cannot express longer "
                "periods: use an interval (every=...) instead"
            )
    if star:
        values = set(range(field.low, field.high + 1, step))
        return item, values, False, False
    low = _value(field, first)
    if second is None:
        values = {low} if step_text is None else set(range(low, field.high + 1, step))
        return item, values, False, False
    high = _value(field, second)
    if low == high:
        raise _FieldError(
            f"{item!r} is a range with equal ends: croniter 7 reads it as every value of the "
            f"field, classic cron as the single value {low}; write '{low}' or '*'"
        )
    if low > high:
        if step_text is not None:
            raise _FieldError(f"{item!r}: a wrap-around range cannot take a step")
        values = set(range(low, field.high + 1)) | set(range(field.low, high + 1))
        return item, values, False, True
    return item, set(range(low, high + 1, step)), False, False


def _parse_field(field: _Field, text: str) -> _ParsedField:
    if text == "":
        raise _FieldError("empty")
    parts: list[str] = []
    plain: list[str] = []
    specials: list[str] = []
    values: set[int] = set()
    wrapped = every = False
    for item in text.upper().split(","):
        if item == "":
            raise _FieldError("empty list item")
        part, item_values, item_special, item_wrapped = _parse_item(field, item)
        parts.append(part)
        values |= item_values
        wrapped = wrapped or item_wrapped
        every = every or item == "*"
        if item_special:
            specials.append(item)
        else:
            plain.append(item)
    if every:
        # every value, whatever else is listed ('*,5', '1,*', '*,SAT#3')
        high = 6 if field is _DOW else field.high
        return _ParsedField("*", frozenset(range(field.low, high + 1)), False, False, True)
    if field is _DOW and specials and plain:
        raise _FieldError(
            f"plain days ({','.join(plain)}) and '#'/'L' days ({','.join(specials)}) cannot be "
            "mixed in one field (croniter cannot evaluate them together); use two schedules, "
            f"one with day-of-week '{','.join(plain)}' and one with '{','.join(specials)}'"
        )
    if field is _DOW:
        values = {v % 7 for v in values}
    return _ParsedField(",".join(parts), frozenset(values), bool(specials), wrapped, False)


# --------------------------------------------------------------------------------------------
# Expressions
# --------------------------------------------------------------------------------------------


def _field_error(expr: str, field: _Field, text: str, reason: str, layout: str) -> str:
    return (
        f"invalid cron expression {expr!r}: {field.name} field {text!r}: {reason} "
        f"(fields: {layout})"
    )


def _parse_fields(expr: str, texts: list[str]) -> tuple[_ParsedField, ...]:
    fields = _FIELDS_6 if len(texts) == 6 else _FIELDS_5
    layout = _LAYOUT_6 if len(texts) == 6 else _LAYOUT_5
    parsed: list[_ParsedField] = []
    for field, text in zip(fields, texts, strict=False):
        try:
            parsed.append(_parse_field(field, text))
        except _FieldError as exc:
            message = _field_error(expr, field, text, str(exc), layout)
            if field is _SECOND and _YEAR_RE.match(text):
                message += (
                    "; this looks like a year, and timewheel has no year field: drop it and "
                    "bound the years with start= and end="
                )
            elif len(texts) == 6 and _valid_seconds_first(texts):
                rotated = " ".join([*texts[1:], texts[0]])
                message += (
                    "; this looks like a seconds-first (Quartz/Spring/cronsim) expression: "
                    f"timewheel puts seconds last, so write {rotated!r}"
                )
            raise InvalidScheduleError(message) from None
    return tuple(parsed)


def _valid_seconds_first(texts: list[str]) -> bool:
    rotated = [*texts[1:], texts[0]]
    try:
        for field, text in zip(_FIELDS_6, rotated, strict=False):
            _parse_field(field, text)
    except _FieldError:
        return False
    return True


def _croniter_values(field: _Field, expanded: Sequence[object]) -> frozenset[int]:
    if list(expanded) == ["*"]:
        high = 6 if field is _DOW else field.high
        return frozenset(range(field.low, high + 1))
    return frozenset(v for v in expanded if isinstance(v, int))


def _refuse_non_ascii(expr: str) -> None:
    """Refuse characters outside ASCII, naming the first one (a pasted no-break space, say)."""
    for position, char in enumerate(expr):
        if not char.isascii():
            name = unicodedata.name(char, "unnamed character")
            if char.isspace():
                how = "separate the fields with plain ASCII spaces"
                kind = "a non-ASCII space"
            else:
                how = "write the expression in ASCII"
                kind = "a non-ASCII character"
            raise InvalidScheduleError(
                f"invalid cron expression {expr!r}: U+{ord(char):04X} {name} at index "
                f"{position} is {kind}; {how}"
            )


def _expand_alias(expr: str, stripped: str) -> str:
    alias = stripped.lower()
    if alias == "@reboot":
        raise InvalidScheduleError(
            "cron alias '@reboot' is not supported: a scheduler has no boot; run the "
            "function once at start-up with schedule(fn, delay=0) instead"
        )
    if alias.startswith("@every"):
        raise InvalidScheduleError(
            f"cron alias {stripped!r} is not supported: use an interval, "
            "e.g. schedule(fn, every=timedelta(minutes=5))"
        )
    if alias not in _ALIASES:
        raise InvalidScheduleError(
            f"unknown cron alias {stripped!r}: use one of {', '.join(_ALIASES)}"
        )
    return _ALIASES[alias]


def _split_fields(expr: str, stripped: str) -> list[str]:
    zone = _ZONE_PREFIX_RE.match(stripped)
    if zone:
        setting = stripped.split()[0]
        rest = zone.group(2)
        raise InvalidScheduleError(
            f"invalid cron expression {expr!r}: {setting!r} sets a time zone inside the "
            f"expression, which timewheel does not read; pass it as tz={zone.group(1)!r} and "
            f"write the expression without it ({rest!r})"
        )
    texts = stripped.split()
    if len(texts) == 7:
        raise InvalidScheduleError(
            f"invalid cron expression {expr!r}: got 7 fields, and a seventh field (a year, as "
            f"in Quartz) is not supported: write 5 fields ({_LAYOUT_5}) or 6 ({_LAYOUT_6}, "
            "seconds last), and bound the years with start= and end="
        )
    if len(texts) not in (5, 6):
        raise InvalidScheduleError(
            f"invalid cron expression {expr!r}: expected 5 fields ({_LAYOUT_5}) or 6 fields "
            f"({_LAYOUT_6}, seconds last), got {len(texts)}"
        )
    return texts


@functools.lru_cache(maxsize=4096)
def _parse_cached(expr: str) -> CronExpression:
    """:func:`parse_cron` for a ``str`` (cached; a malformed one raises every time)."""
    _refuse_non_ascii(expr)
    stripped = expr.strip()
    if stripped.startswith("@"):
        stripped = _expand_alias(expr, stripped)
    texts = _split_fields(expr, stripped)
    fields = _parse_fields(expr, texts)
    if len(fields) == 6 and fields[5].every and not texts[0].startswith("*"):
        rotated = " ".join([*texts[1:], texts[0]])
        raise InvalidScheduleError(
            f"ambiguous cron expression {expr!r}: timewheel puts seconds last, so this fires "
            f"every second of each matching minute; if you meant seconds first (Quartz "
            f"style), write {rotated!r}; if you do want every second, write '0-59' in the "
            "second field"
        )
    joined = " ".join(f.text for f in fields)
    try:
        expanded, _nth = croniter.expand(joined)
    except CroniterError as exc:
        raise InvalidScheduleError(f"invalid cron expression {expr!r}: {exc}") from None
    spec = _FIELDS_6 if len(fields) == 6 else _FIELDS_5
    for field, parsed, exp in zip(spec, fields, expanded, strict=False):
        if parsed.special:
            continue
        theirs = _croniter_values(field, exp)
        if theirs != parsed.values:
            raise InvalidScheduleError(
                f"ambiguous cron expression {expr!r}: {field.name} field {parsed.text!r} is "
                f"{sorted(theirs)} for croniter 7 but {sorted(parsed.values)} in classic cron; "
                "write the values explicitly (e.g. as a list)"
            )
    fixed = not texts[0].startswith("*") and not texts[1].startswith("*")
    _check_days_exist(expr, fields, texts)
    candidates = _croniter_expressions(fields, texts)
    firing = tuple(candidate for candidate in candidates if _can_fire(candidate))
    if not firing:
        raise InvalidScheduleError(
            f"cron expression {expr!r} can never fire: no matching time within 50 years"
        )
    return CronExpression(expr, fields, tuple(texts), fixed, firing)


def _days_and(texts: Sequence[str]) -> bool:
    """Vixie cron: a day must match both day fields if either starts with '*', else either."""
    return texts[_DOM_INDEX].startswith("*") or texts[_DOW_INDEX].startswith("*")


def _croniter_expressions(fields: Sequence[_ParsedField], texts: Sequence[str]) -> list[str]:
    """The croniter expressions whose matches together are the schedule's."""
    spelled = [f.text for f in fields]
    dom, dow = fields[_DOM_INDEX], fields[_DOW_INDEX]
    if _days_and(texts):
        return [" ".join(spelled)]
    if dom.every or dow.every:  # either day field matches every day: so does the expression
        spelled[_DOM_INDEX] = spelled[_DOW_INDEX] = "*"
        return [" ".join(spelled)]
    if dow.special:
        # croniter does not OR '#n'/'nL' days with a restricted day-of-month: evaluate each
        # day field alone (the other '*') and merge the matches
        by_dom, by_dow = spelled.copy(), spelled.copy()
        by_dom[_DOW_INDEX] = "*"
        by_dow[_DOM_INDEX] = "*"
        return [" ".join(by_dom), " ".join(by_dow)]
    return [" ".join(spelled)]


def _check_days_exist(expr: str, fields: Sequence[_ParsedField], texts: Sequence[str]) -> None:
    """Refuse a day-of-month that no month of the expression has (``0 0 30 2 *``)."""
    dom, month = fields[_DOM_INDEX], fields[_MONTH_INDEX]
    if _days_and(texts) and not dom.special and dom.values:
        longest = max(calendar.monthrange(2000, m)[1] for m in month.values)
        if min(dom.values) > longest:
            months = ", ".join(calendar.month_abbr[m] for m in sorted(month.values))
            raise InvalidScheduleError(
                f"cron expression {expr!r} can never fire: day-of-month "
                f"{texts[_DOM_INDEX]!r} never occurs in month(s) {months}"
            )


def _can_fire(croniter_expression: str) -> bool:
    """Whether croniter finds a match (it gives up after 50 years; ``0 0 * 2 1#5``)."""
    probe = croniter(croniter_expression, 946684800.0, implement_cron_bug=True)
    try:
        probe.get_next()
    except CroniterBadDateError:
        return False
    return True
