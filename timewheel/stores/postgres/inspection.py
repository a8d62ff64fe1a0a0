"""The store's inspection queries (:class:`~timewheel.stores.base.SupportsInspection`), each one
read-only statement along an index of the schema (:mod:`~timewheel.stores.postgres.schema`).

:class:`InspectionQueries` is mixed into
:class:`~timewheel.stores.postgres.store.PostgresStore`, which provides :meth:`read_rows`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from timewheel.stores import policy
from timewheel.stores.postgres import schema
from timewheel.stores.sqlite.codec import (
    TASKS,
    Row,
    decode_dependents,
    from_us,
    to_us,
    upstream_entry,
)
from timewheel.task import Task, TaskState

__all__ = ["InspectionQueries"]

_SEL = schema.SELECT_TASKS


class InspectionQueries:
    """What the dashboard and ``timewheel inspect`` ask a PostgreSQL store."""

    def read_rows(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        """The rows of one read-only statement *sql* with *params*, in one transaction."""
        raise NotImplementedError

    def oldest_ready_age(self, now: float) -> float | None:
        """Seconds since the earliest due time among READY tasks (how far workers lag), or None."""
        (m,) = self.read_rows("SELECT min(due) FROM tasks WHERE state = 'ready'")[0]
        return None if m is None else max(0.0, now - from_us(m))

    def due_histogram(
        self, now: float, *, horizon: float = 3600.0, bucket: float = 60.0
    ) -> list[tuple[float, int]]:
        """Expected load: ``(bucket_start, n)`` for PENDING tasks due in ``[now, now + horizon)``."""
        n_buckets = policy.histogram_buckets(horizon, bucket)
        start, width = to_us(now), to_us(bucket)
        rows = self.read_rows(
            "SELECT (due - %s) / %s, count(*) FROM tasks WHERE state = 'pending' AND due >= %s "
            "AND due < %s GROUP BY 1",
            (start, width, start, start + to_us(horizon)),
        )
        counts = [0] * n_buckets
        for b, n in rows:
            if 0 <= b < n_buckets:
                counts[b] += n
        return policy.histogram(now, bucket, counts)

    def recent_failures(self, limit: int = 10) -> list[Task]:
        """The last *limit* tasks that ended FAILED, TIMED_OUT or UPSTREAM_FAILED, newest first."""
        sts = [s.value for s in policy.REPORTED_FAILURES]
        rows = self.read_rows(
            f"{_SEL} WHERE {schema.states_condition(sts)} ORDER BY updated DESC, id LIMIT %s",
            (sts, max(limit, 0)),
        )
        return [TASKS.decode(r) for r in rows]

    def ended_histogram(
        self, since: float, *, horizon: float = 3600.0, bucket: float = 60.0
    ) -> list[tuple[float, dict[TaskState, int]]]:
        """What ended in ``[since, since + horizon)`` per *bucket*, counted along the index of
        ended tasks by end time."""
        n = policy.histogram_buckets(horizon, bucket)
        start, width = to_us(since), to_us(bucket)
        rows = self.read_rows(
            f"SELECT (updated - %s) / %s, state, count(*) FROM tasks WHERE "
            f"{policy.ENDED_SQL} AND updated >= %s AND updated < %s GROUP BY 1, 2",
            (start, width, start, start + to_us(horizon)),
        )
        return policy.ended_histogram(since, bucket, n, rows)

    def ended_since(
        self, since: float, *, limit: int
    ) -> list[tuple[TaskState, float, float | None, float]]:
        """``(state, due, started, ended)`` of up to *limit* tasks that ended at or after
        *since*, the latest first (along the index of tasks by state and end time)."""
        rows = self.read_rows(
            f"SELECT state, due, started, updated FROM tasks WHERE {policy.ENDED_SQL} "
            f"AND updated >= %s ORDER BY updated DESC, id LIMIT %s",
            (to_us(since), max(limit, 0)),
        )
        return policy.ended_rows(rows)

    def count_by_queue(self) -> dict[str, dict[TaskState, int]]:
        """Tasks per queue and state, in one statement (one snapshot): the queues other than
        the default one along their index of queue and state, every queue by state (along each
        state's own index, :data:`~timewheel.stores.postgres.schema.COUNT_BY_STATE`)."""
        return policy.queue_counts(
            self.read_rows(
                f"SELECT queue, state, count(*) FROM tasks WHERE {policy.OTHER_QUEUES_SQL} "
                f"GROUP BY queue, state UNION ALL SELECT NULL, s.* FROM ({schema.COUNT_BY_STATE}) s"
            )
        )

    def by_function(self, prefix: str, *, limit: int) -> list[Task]:
        """Up to *limit* tasks whose function reference starts with *prefix*, by function
        reference (in code point order) then id, in one statement: PENDING and ended tasks
        along a range of the index on function reference
        (:data:`~timewheel.stores.postgres.schema.FUNCTION_INDEXED`), READY and RUNNING ones
        (the work in flight) along their own partial indexes."""
        low, high = policy.prefix_range(prefix)
        match = '(func COLLATE "C") >= %s'
        params: list[Any] = [low]
        if high is not None:
            match += ' AND (func COLLATE "C") < %s'
            params.append(high)
        order = ' ORDER BY (func COLLATE "C"), id LIMIT %s'
        limit = max(limit, 0)
        branches = [
            f"({_SEL} WHERE {schema.FUNCTION_INDEXED} AND {match}{order})",
            f"({_SEL} WHERE state = 'ready' AND {match}{order})",
            f"({_SEL} WHERE state = 'running' AND {match}{order})",
        ]
        rows = self.read_rows(
            f"SELECT * FROM ({' UNION ALL '.join(branches)}) t{order}",
            (*params, limit) * 3 + (limit,),
        )
        return [TASKS.decode(r) for r in rows]

    def retrying(self, limit: int) -> list[Task]:
        """Up to *limit* PENDING tasks with ``attempts > 0``, the soonest due first (along
        their own index)."""
        rows = self.read_rows(
            f"{_SEL} WHERE {policy.RETRYING_SQL} ORDER BY due, id LIMIT %s",
            (max(limit, 0),),
        )
        return [TASKS.decode(r) for r in rows]

    def last_ended(self, schedule_id: str) -> Task | None:
        """The instance of *schedule_id* that ended last, or None (along the schedule index)."""
        rows = self.read_rows(
            f"{_SEL} WHERE schedule_id = %s AND {policy.ENDED_SQL} "
            "ORDER BY updated DESC, id DESC LIMIT 1",
            (schedule_id,),
        )
        return TASKS.decode(rows[0]) if rows else None

    def dependents(self, task_id: str, *, limit: int) -> list[Task]:
        """Up to *limit* tasks naming *task_id* in their ``after``, by id (reads only the
        tasks that have upstream tasks)."""
        rows = self.read_rows(
            _SEL + " WHERE after IS NOT NULL AND strpos(after, %s) > 0 ORDER BY id",
            (upstream_entry(task_id),),
        )
        return decode_dependents(rows, task_id, limit)
