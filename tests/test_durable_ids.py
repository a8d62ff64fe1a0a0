"""The ids a scheduler on a durable store gives new tasks: random version 4 UUIDs as 32 hex
digits (``uuid.uuid4().hex``), unique across processes; a child after ``fork()`` draws its own."""

from __future__ import annotations

import os
import uuid

import pytest

from timewheel.options import id_maker


def _never() -> str:
    raise AssertionError("a durable store's ids are not the scheduler's counter")


def test_durable_ids_are_uuid4_hex() -> None:
    new_id = id_maker(True, _never)
    ids = [new_id() for _ in range(5000)]
    assert len(set(ids)) == len(ids)
    for i in ids:
        u = uuid.UUID(hex=i)
        assert (u.hex, u.version, u.variant) == (i, 4, uuid.RFC_4122)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() only")
def test_a_forked_child_draws_other_ids() -> None:
    new_id = id_maker(True, _never)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its ids, then out without running the parent's cleanup
        os.write(write, " ".join(new_id() for _ in range(100)).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        child = set(f.read().split())
    os.waitpid(pid, 0)
    parent = {new_id() for _ in range(100)}
    assert len(child) == 100
    assert not child & parent
