"""Interval rules: :class:`IntervalRule`, slots at ``start + k * every`` in elapsed UTC seconds,
computed by multiplication so they never drift."""

from __future__ import annotations

import math
import random
import threading
from datetime import datetime, timedelta

from timewheel.errors import InvalidScheduleError
from timewheel.rules.base import (
    check_window,
    finite_seconds,
    jitter_seconds,
    optional_instant,
    parse_every,
    utc_text,
)

__all__ = ["IntervalRule"]


class IntervalRule:
    """Slots at ``start + k * every`` (k = 0, 1, 2, ...), in elapsed UTC seconds.

    ``IntervalRule(every, *, start=None, end=None, jitter=0)``:

    * ``every``: seconds (> 0, finite) or a ``timedelta``.
    * ``start``: the anchor, slot 0 (UTC epoch seconds or an aware datetime). When None, the rule
      anchors itself on the ``t`` of its first :meth:`next_after` call (so the first slot is
      ``t + every``) and :meth:`to_spec` records that anchor from then on; the scheduler passes
      the schedule's creation time as ``start`` through :func:`make_rule`.
    * ``end``: exclusive bound: slots satisfy ``slot < end``; ``start=s, end=s + n*every`` gives
      exactly n slots.
    * ``jitter``: seconds added by :meth:`jittered` to the run time, never to the slot. A jitter
      of ``every`` or more lets consecutive runs swap order; the overlap policy then applies.

    Slots are computed by multiplication from the anchor, never by accumulating, so a thousand
    slots later the rule has not drifted, whenever the runs actually started or finished.
    """

    __slots__ = ("_end", "_every", "_jitter", "_lock", "_start")

    def __init__(
        self,
        every: float | timedelta,
        *,
        start: float | datetime | None = None,
        end: float | datetime | None = None,
        jitter: float = 0.0,
    ) -> None:
        self._every = parse_every(every)
        self._start = optional_instant("start", start)
        self._end = optional_instant("end", end)
        self._jitter = jitter_seconds(jitter)
        check_window(self._start, self._end)
        self._lock = threading.Lock()

    @property
    def every(self) -> float:
        """The period in seconds."""
        return self._every

    @property
    def start(self) -> float | None:
        """The anchor (slot 0), or None while the rule is not yet anchored."""
        return self._start

    @property
    def end(self) -> float | None:
        """The exclusive end, or None."""
        return self._end

    @property
    def jitter(self) -> float:
        """Maximum jitter in seconds added by :meth:`jittered`."""
        return self._jitter

    def anchored(self, start: float) -> IntervalRule:
        """Return a copy anchored at ``start`` (this rule's own anchor wins if it has one)."""
        anchor = self._start if self._start is not None else finite_seconds("start", start)
        return IntervalRule(self._every, start=anchor, end=self._end, jitter=self._jitter)

    def slot(self, k: int) -> float:
        """Return slot ``k`` (``start + k * every``); the rule must be anchored."""
        if self._start is None:
            raise InvalidScheduleError("the interval rule has no start yet; call anchored()")
        return self._start + k * self._every

    def index_after(self, t: float) -> int:
        """Return the smallest k with ``slot(k) > t`` (k >= 0); the rule must be anchored."""
        start = self.slot(0)
        every = self._every
        k = max(0, math.floor((t - start) / every) + 1)
        while start + k * every <= t:  # guard against rounding in the division
            k += 1
        while k > 0 and start + (k - 1) * every > t:
            k -= 1
        return k

    def next_after(self, t: float) -> float | None:
        """Return the first slot strictly after ``t``, or None at/after ``end``."""
        t = finite_seconds("t", t)
        if self._start is None:
            with self._lock:
                if self._start is None:
                    self._start = t
        slot = self.slot(self.index_after(t))
        if self._end is not None and slot >= self._end:
            return None
        return slot

    def count_between(self, after: float, upto: float) -> int:
        """Number of slots ``s`` with ``after < s <= upto`` (and ``s < end``), in O(1)."""
        if upto <= after:
            return 0
        first = self.index_after(after)
        last = self.index_after(upto)  # first index beyond upto
        if self._end is not None:
            last = min(last, self.index_after(math.nextafter(self._end, -math.inf)))
        return max(0, last - first)

    def jittered(self, slot: float, rng: random.Random) -> float:
        """Return ``slot + rng.uniform(0, jitter)`` (``slot`` itself when jitter is 0)."""
        if self._jitter == 0:
            return slot
        return slot + rng.uniform(0.0, self._jitter)

    def describe(self) -> str:
        """E.g. ``every 300s from 2026-01-01T00:00:00Z``."""
        text = f"every {self._every:g}s"
        text += f" from {utc_text(self._start)}" if self._start is not None else " (unanchored)"
        if self._end is not None:
            text += f" until {utc_text(self._end)} (exclusive)"
        if self._jitter:
            text += f", jitter {self._jitter:g}s"
        return text

    def to_spec(self) -> dict[str, object]:
        """``{"kind": "interval", "every": ..., "start": ..., "end": ..., "jitter": ...}``."""
        return {
            "kind": "interval",
            "every": self._every,
            "start": self._start,
            "end": self._end,
            "jitter": self._jitter,
        }

    def __repr__(self) -> str:
        return f"IntervalRule({self._every!r}, start={self._start!r}, end={self._end!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, IntervalRule):
            return NotImplemented
        return self.to_spec() == other.to_spec()

    def __hash__(self) -> int:
        return hash((self._every, self._start, self._end, self._jitter))
