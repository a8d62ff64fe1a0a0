"""Building rules: from the scheduler's arguments (:func:`make_rule`), from a stored spec
(:func:`rule_from_spec`), and shared by spec among many schedules (:class:`RuleCache`)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from datetime import datetime, timedelta
from types import MappingProxyType
from zoneinfo import ZoneInfo

from timewheel.errors import InvalidScheduleError
from timewheel.rules.base import type_name
from timewheel.rules.cron import CronRule
from timewheel.rules.interval import IntervalRule

__all__ = ["RuleCache", "make_rule", "rule_from_spec"]


def make_rule(
    *,
    cron: str | None = None,
    every: float | timedelta | None = None,
    tz: str | ZoneInfo | None = None,
    start: float | datetime | None = None,
    end: float | datetime | None = None,
    jitter: float = 0.0,
) -> CronRule | IntervalRule:
    """Build a rule from scheduler arguments: exactly one of ``cron`` and ``every``.

    ``tz`` applies to cron only (an interval is elapsed UTC time; passing ``tz`` with ``every``
    is refused so nobody believes it matters). ``start``/``end`` bound either kind; for an
    interval ``start`` is the anchor (the scheduler passes the creation time).
    """
    if (cron is None) == (every is None):
        raise InvalidScheduleError(
            f"pass exactly one of cron= and every= (got cron={cron!r}, every={every!r})"
        )
    if cron is not None:
        return CronRule(cron, tz, jitter=jitter, start=start, end=end)
    assert every is not None
    if tz is not None:
        raise InvalidScheduleError(
            f"tz={tz!r} does not apply to every=: intervals are elapsed UTC time; "
            "use cron= for wall-clock schedules"
        )
    return IntervalRule(every, start=start, end=end, jitter=jitter)


def _spec_number(spec: Mapping[str, object], name: str) -> float | None:
    value = spec.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidScheduleError(f"rule spec {name} must be a number or null (got {value!r})")
    return float(value)


def rule_from_spec(spec: Mapping[str, object]) -> CronRule | IntervalRule:
    """Rebuild a rule from :meth:`Rule.to_spec` output (e.g. read back from JSON)."""
    if not isinstance(spec, Mapping):
        raise InvalidScheduleError(f"rule spec must be a mapping (got {type_name(spec)})")
    kind = spec.get("kind")
    start_f, end_f = _spec_number(spec, "start"), _spec_number(spec, "end")
    jitter_f = _spec_number(spec, "jitter") or 0.0
    if kind == "cron":
        expr, tz = spec.get("expr"), spec.get("tz")
        if not isinstance(expr, str) or not isinstance(tz, (str, type(None))):
            raise InvalidScheduleError(f"malformed cron rule spec {dict(spec)!r}")
        return CronRule(expr, tz, jitter=jitter_f, start=start_f, end=end_f)
    if kind == "interval":
        every = spec.get("every")
        if isinstance(every, bool) or not isinstance(every, (int, float)):
            raise InvalidScheduleError(f"malformed interval rule spec {dict(spec)!r}")
        return IntervalRule(every, start=start_f, end=end_f, jitter=jitter_f)
    raise InvalidScheduleError(
        f"unknown rule kind {kind!r} in spec {dict(spec)!r}: expected 'cron' or 'interval'"
    )


class RuleCache:
    """Rules shared by spec: schedules whose rule is the same get one rule object and one
    read-only spec mapping.

    A bounded LRU (*size* entries, least recently used dropped first), looked up by a stored
    spec (:meth:`from_spec`) or by the arguments that make a rule (:meth:`make`: creating
    100,000 schedules with one expression builds and validates it once). Built rules are
    immutable in what they answer, so sharing one among many schedules is safe; an interval
    rule without an anchor (it anchors itself on its first question) is built afresh every time.
    Thread-safe.
    """

    __slots__ = ("_entries", "_lock", "_made", "size")

    def __init__(self, size: int = 4096) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise InvalidScheduleError(f"size must be an int >= 1 (got {size!r})")
        self.size = size
        self._entries: OrderedDict[
            tuple[object, ...], tuple[CronRule | IntervalRule, Mapping[str, object]]
        ] = OrderedDict()
        self._lock = threading.Lock()
        # make()'s arguments -> entry: read without the lock (one dict lookup per schedule
        # created), cleared when full
        self._made: dict[
            tuple[object, ...], tuple[CronRule | IntervalRule, Mapping[str, object]]
        ] = {}

    def from_spec(self, spec: Mapping[str, object]) -> CronRule | IntervalRule:
        """The rule of *spec* (as :func:`rule_from_spec`), built once while it stays cached."""
        try:
            key: tuple[object, ...] = tuple(spec.items())
            hash(key)
        except (AttributeError, TypeError):  # not a mapping of plain values: no sharing
            return rule_from_spec(spec)
        got = self._get(key)
        if got is not None:
            return got[0]
        return self._keep(rule_from_spec(spec), key)[0]

    def make(
        self,
        *,
        cron: str | None = None,
        every: float | timedelta | None = None,
        tz: str | ZoneInfo | None = None,
        start: float | datetime | None = None,
        end: float | datetime | None = None,
        jitter: float = 0.0,
    ) -> tuple[CronRule | IntervalRule, Mapping[str, object]]:
        """``(rule, spec)`` for :func:`make_rule`'s arguments: the rule shared with every equal
        one, and its spec as a shared read-only mapping (what a schedule record stores)."""
        # the types too: True == 1 == 1.0 as keys, and make_rule refuses a bool jitter
        key: tuple[object, ...] = (
            cron,
            every,
            tz,
            start,
            end,
            jitter,
            every.__class__,
            start.__class__,
            end.__class__,
            jitter.__class__,
        )
        try:
            got = self._made.get(key)  # hashes the key: an unhashable argument raises
            hashable = True
        except TypeError:
            got, hashable = None, False
        if got is not None:
            return got
        rule = make_rule(cron=cron, every=every, tz=tz, start=start, end=end, jitter=jitter)
        entry = self._keep(rule, None)
        if hashable and not (isinstance(rule, IntervalRule) and rule.start is None):
            made = self._made
            if len(made) >= self.size:
                made.clear()  # a burst of distinct rules: start over rather than track age
            made[key] = entry
        return entry

    def share(self, rule: CronRule | IntervalRule) -> CronRule | IntervalRule:
        """The cached rule with *rule*'s spec if there is one, else *rule*, now cached."""
        return self._keep(rule, None)[0]

    def _get(
        self, key: tuple[object, ...]
    ) -> tuple[CronRule | IntervalRule, Mapping[str, object]] | None:
        with self._lock:
            got = self._entries.get(key)
            if got is not None:
                self._entries.move_to_end(key)
            return got

    def _keep(
        self, rule: CronRule | IntervalRule, key: tuple[object, ...] | None
    ) -> tuple[CronRule | IntervalRule, Mapping[str, object]]:
        """Cache *rule* under its spec (and *key*), or return the entry already cached."""
        spec = rule.to_spec()
        entry: tuple[CronRule | IntervalRule, Mapping[str, object]] = (rule, MappingProxyType(spec))
        if isinstance(rule, IntervalRule) and rule.start is None:
            return entry
        spec_key = tuple(spec.items())
        entries = self._entries
        with self._lock:
            entry = entries.setdefault(spec_key, entry)
            entries.move_to_end(spec_key)
            if key is not None:
                entries[key] = entry
            while len(entries) > self.size:
                entries.popitem(last=False)
        return entry

    def __len__(self) -> int:
        return len(self._entries)
