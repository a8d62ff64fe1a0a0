"""RecentValues: the bounded window of a scheduler's recent lateness."""

from __future__ import annotations

from collections import deque

from hypothesis import given
from hypothesis import strategies as st

from timewheel.report import RecentValues


@given(st.integers(1, 50), st.lists(st.floats(allow_nan=False), max_size=300))
def test_keeps_the_latest_values_like_a_bounded_deque(capacity: int, values: list[float]) -> None:
    window, model = RecentValues(capacity), deque[float](maxlen=capacity)
    for v in values:
        window.append(v)
        model.append(v)
        assert list(window) == list(model)
        assert len(window) == len(model)


def test_storage_stops_growing_at_capacity() -> None:
    window = RecentValues(1000)
    for i in range(1000):
        window.append(float(i))
    full = window.nbytes
    assert full <= 1000 * 8 * 1.2 + 100
    for i in range(50_000):
        window.append(float(i))
    assert window.nbytes == full
    assert len(window) == 1000
    assert min(window) == 49_000.0
    assert max(window) == 49_999.0
