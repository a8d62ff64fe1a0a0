"""Holding CPython's full garbage collections off while a herd is prepared and promoted.

A herd's window (its pre-warming, then its promotion) grows the heap by a successor per head. On
a heap of 200,000 tasks each full collection that growth sets off pauses every thread for about
300 ms, whichever trigger step it lands in. :class:`CollectorHold` moves everything the
collector tracks out of its reach (``gc.freeze()``) for the window and hands it back after
(``gc.unfreeze()``). Frozen objects are still freed as soon as nothing refers to them; only
garbage cycles made in the window wait for its end, and are collected as usual from then on.
"""

from __future__ import annotations

import gc

__all__ = ["CollectorHold"]


class CollectorHold:
    """Freezes the collector's generations during a window, and only if it owns the freeze.

    Args:
        enabled: ``False`` makes :meth:`hold` do nothing.

    :meth:`hold` does nothing when the collector is disabled, or when something else in the
    process froze objects first (it decides when they come back, not this hold). Called from
    one thread at a time (the trigger's).
    """

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.held = False

    def hold(self) -> None:
        """Freeze what the collector tracks now (again, so what was made since is held too)."""
        if not self.enabled:
            return
        if not self.held:
            if not gc.isenabled() or gc.get_freeze_count():
                return
            self.held = True
        gc.freeze()

    def release(self) -> None:
        """Hand the frozen objects back to the collector (idempotent)."""
        if self.held:
            self.held = False
            gc.unfreeze()
