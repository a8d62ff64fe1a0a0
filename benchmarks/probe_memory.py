"""Where a soak's RSS goes: Python-level memory against the allocators' (memory store).

Drives a scheduler the way ``bench_soak.py`` does (one-shot tasks at ``--rate`` per second, due
within a second, one in twenty raising; 20 schedules every second; ``keep_finished=--keep``) and
every ``--every`` seconds prints, after ``gc.collect()``:

* ``rss``: resident memory, MiB;
* ``blocks``: ``sys.getallocatedblocks()``, the blocks Python's small-object allocator hands out
  (every object up to 512 bytes, tracked by the garbage collector or not);
* ``pyarenas``: that allocator's 1 MiB arenas currently mapped (``sys._debugmallocstats``);
* ``malloc used / free / heap / mapped``: glibc's ``mallinfo2()`` over all its arenas: bytes in
  use, bytes free inside its heaps, the heaps' total size (what ``malloc`` took from the system
  with ``brk``/for its arenas; RSS follows it) and the bytes of blocks it mapped one by one;
* with ``--tracemalloc``: the memory ``tracemalloc`` traces (every Python allocation, large ones
  included), started once ``--trace-at`` seconds passed (after the retention period); snapshots
  taken at ``--snap-a`` seconds and at the end are compared by traceback (``--frames`` deep) and
  the largest differences printed per task scheduled in between.

A live structure that grows shows in ``blocks`` or the traced memory; memory the allocators hold
without Python holding it shows as ``malloc free`` or ``heap`` rising while those stay flat.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import logging
import os
import random
import re
import sys
import time
import tracemalloc
from array import array
from datetime import timedelta

import bench_soak as bs

import timewheel as tw


class MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2``."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def mallinfo() -> MallInfo2 | None:
    """glibc's allocator figures, or None where there is no ``mallinfo2`` (glibc < 2.33)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        fn = libc.mallinfo2
    except (OSError, AttributeError):
        return None
    fn.restype = MallInfo2
    info: MallInfo2 = fn()
    return info


def pymalloc_arenas() -> int:
    """Arenas of Python's small-object allocator mapped now (``sys._debugmallocstats`` writes to
    the C-level stderr, read through a pipe)."""
    r, w = os.pipe()
    saved = os.dup(2)
    try:
        os.dup2(w, 2)
        sys._debugmallocstats()
    finally:
        os.dup2(saved, 2)
        os.close(w)
        os.close(saved)
    with os.fdopen(r, "rb") as f:
        out = f.read().decode()
    m = re.search(r"# arenas allocated current\s*=\s*([\d,]+)", out)
    return -1 if m is None else int(m.group(1).replace(",", ""))


def line(start: float, n: int) -> str:
    gc.collect()
    mib = 2**20
    text = (
        f"t={time.time() - start:6.1f}s tasks={n:7d} rss={bs.rss_bytes() / mib:6.2f} "
        f"blocks={sys.getallocatedblocks():7d} pyarenas={pymalloc_arenas():3d}"
    )
    info = mallinfo()
    if info is not None:
        text += (
            f" malloc used/free/heap/mapped={info.uordblks / mib:.2f}/{info.fordblks / mib:.2f}/"
            f"{info.arena / mib:.2f}/{info.hblkhd / mib:.2f}"
        )
    if tracemalloc.is_tracing():
        text += f" traced={tracemalloc.get_traced_memory()[0] / mib:.3f}"
    return text + " MiB"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seconds", type=float, default=180.0, help="run time")
    ap.add_argument("--rate", type=float, default=300.0, help="one-shot tasks per second")
    ap.add_argument("--keep", type=float, default=10.0, help="keep_finished, seconds")
    ap.add_argument("--every", type=float, default=10.0, help="seconds between two lines")
    ap.add_argument("--tracemalloc", action="store_true", help="trace and diff two snapshots")
    ap.add_argument("--trace-at", type=float, default=20.0, help="start tracing after (s)")
    ap.add_argument("--snap-a", type=float, default=50.0, help="first snapshot after (s)")
    ap.add_argument("--frames", type=int, default=25, help="traceback depth")
    args = ap.parse_args()
    logging.disable(logging.ERROR)  # one task in twenty fails on purpose: no tracebacks printed
    capacity = int(args.seconds * args.rate) + 10
    bs._runs[:] = bytearray(capacity)
    bs._late[:] = array("d", bytes(8 * capacity))
    sched = tw.Scheduler(store=tw.MemoryStore(), keep_finished=args.keep)
    sched.start()
    for i in range(20):
        sched.schedule(bs.tick, every=timedelta(seconds=1), id=f"tick-{i}")
    rng = random.Random(1)
    start = time.time()
    n = 0
    next_line = start
    first: tuple[tracemalloc.Snapshot, int] | None = None
    while (now := time.time()) < start + args.seconds:
        target = min(capacity, int((now - start) * args.rate))
        while n < target:
            sched.schedule(bs.work, n, delay=rng.random())
            n += 1
        if args.tracemalloc and not tracemalloc.is_tracing() and now - start >= args.trace_at:
            tracemalloc.start(args.frames)
        if tracemalloc.is_tracing() and first is None and now - start >= args.snap_a:
            gc.collect()
            first = (tracemalloc.take_snapshot(), n)
            print("first snapshot:", line(start, n), flush=True)
        if now >= next_line:
            print(line(start, n), flush=True)
            next_line = now + args.every
        time.sleep(0.01)
    if first is not None:
        gc.collect()
        last = tracemalloc.take_snapshot()
        print("last snapshot: ", line(start, n), flush=True)
        skip = [tracemalloc.Filter(False, tracemalloc.__file__)]
        tasks = max(1, n - first[1])
        diff = last.filter_traces(skip).compare_to(first[0].filter_traces(skip), "traceback")
        print(f"\nlargest differences over {tasks:,} tasks (by traceback, innermost frame last):")
        for st in diff[:8]:
            print(
                f"{st.size_diff:+10,d} B ({st.size_diff / tasks:+7.2f} B/task) "
                f"{st.count_diff:+7,d} blocks, {st.size:,} B now"
            )
            for frame in st.traceback.format()[-6:]:
                print("      " + frame)
    sched.shutdown(wait=True)


if __name__ == "__main__":
    main()
