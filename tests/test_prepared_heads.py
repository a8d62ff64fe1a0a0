"""The pre-warmed head table on its own (``timewheel.herds.PreparedHeads``), without a scheduler."""

from __future__ import annotations

from timewheel.herds import PreparedHead, PreparedHeads
from timewheel.rules import Misfire


def _head(
    sid: str,
    slot: float,
    *,
    overlap: bool = False,
    policy: Misfire = Misfire.RUN_ONCE,
    grace: float | None = None,
) -> tuple[str, PreparedHead]:
    tid = f"{sid}@{round(slot * 1_000_000)}"
    successor = f"{sid}@{round((slot + 60) * 1_000_000)}"
    entry = PreparedHead(
        schedule_id=sid,
        slot=slot,
        next_slot=slot + 60,
        successor=successor,
        version=3,
        policy=policy,
        grace=grace,
        check_overlap=overlap,
    )
    return tid, entry


def test_take_sorts_fired_ids_and_entries_leave() -> None:
    table = PreparedHeads()
    on_time = _head("a", 100.0)
    overlapping = _head("b", 100.0, overlap=True)
    skip_with_grace = _head("c", 100.0, policy=Misfire.SKIP, grace=5.0)
    table.keep([on_time, overlapping, skip_with_grace])
    assert len(table) == 3
    run: list[str] = []
    expected: dict[str, int] = {}
    ids = [on_time[0], overlapping[0], skip_with_grace[0], "never@1"]
    slow, asked = table.take(ids, 100.5, run, expected)
    assert run == [on_time[0]]
    assert expected == {on_time[0]: 3}
    assert [tid for tid, _ in asked] == [overlapping[0], skip_with_grace[0]]
    assert slow == ["never@1"]
    assert not table
    assert table.take(["x@1"], 100.5, run, expected) == (["x@1"], [])


def test_a_late_head_is_asked_again() -> None:
    table = PreparedHeads()
    head = _head("a", 100.0)
    table.keep([head])
    run: list[str] = []
    slow, asked = table.take([head[0]], 160.0, run, {})  # at its successor's slot
    assert run == []
    assert slow == []
    assert asked == [head]


def test_waits_while_the_series_has_an_unfired_prepared_head() -> None:
    table = PreparedHeads()
    head = _head("a", 100.0)
    table.keep([head])
    assert head[0] in table
    assert table.waits(head[1].successor, "a")  # the successor follows an unfired head
    assert not table.waits("b@1", "b")
    table.take([head[0]], 100.0, [], {})  # the head fired
    assert not table.waits(head[1].successor, "a")


def test_forget_and_forget_schedule() -> None:
    table = PreparedHeads()
    a, b = _head("a", 100.0), _head("b", 100.0)
    table.keep([a, b])
    table.forget([a[0]])
    assert a[0] not in table
    assert not table.waits(a[1].successor, "a")
    table.forget_schedule("b")
    assert b[0] not in table
    assert not table.waits(b[1].successor, "b")
    assert len(table) == 0
