"""The store contract suite: one set of checks every :class:`~timewheel.stores.base.Store` passes.

Each check is a plain function ``check_xxx(store)`` that takes a fresh, empty store and uses plain
``assert`` statements with messages; nothing here needs pytest. ``timewheel.testing.check_store``
runs them all against a third-party store, and timewheel's own tests parametrize them over every
bundled store (``tests/test_store_contract.py``).

The checks use only values a durable store can keep: function references as strings
(``"timewheel._contract:noop"``), JSON-native arguments (lists, dicts with string keys, numbers,
strings, ``None``), and times that are whole microseconds (durable stores may round to them).
"""

from __future__ import annotations

from collections.abc import Callable

from timewheel._contract import batches, claims, dependencies, schedules, tasks
from timewheel._contract.support import FUNC, T0, noop
from timewheel.stores.base import Store

__all__ = ["CHECKS", "FUNC", "T0", "noop"]

CHECKS: tuple[Callable[[Store], None], ...] = (
    tasks.check_protocol_shape,
    tasks.check_close_idempotent,
    tasks.check_closed_store_refuses_changes,
    tasks.check_insert_get_roundtrip,
    tasks.check_get_missing,
    tasks.check_insert_resets_state_and_version,
    tasks.check_insert_due_task,
    tasks.check_insert_conflict_error,
    tasks.check_insert_conflict_keep,
    tasks.check_insert_conflict_replace,
    tasks.check_insert_replace_running_refused,
    tasks.check_insert_on_conflict_invalid,
    batches.check_insert_many_atomic,
    batches.check_insert_many_returns_changes,
    batches.check_insert_many_on_conflict_invalid,
    batches.check_insert_many_conflict_keep,
    batches.check_insert_many_conflict_replace,
    batches.check_insert_many_dependencies,
    batches.check_insert_many_dependency_refused,
    tasks.check_transition_cas,
    tasks.check_transition_forbidden,
    tasks.check_transition_missing,
    tasks.check_transition_sets_changes,
    tasks.check_transition_refuses_bad_changes,
    tasks.check_version_increments_by_one,
    tasks.check_promote,
    tasks.check_promote_successors,
    tasks.check_promote_keys,
    claims.check_claim_cas,
    claims.check_claim_records_start,
    claims.check_claim_next_order,
    claims.check_claim_next_batch,
    claims.check_claim_next_queues,
    claims.check_claim_next_skips_non_ready,
    claims.check_claim_next_threads,
    claims.check_claim_and_finish_race_threads,
    claims.check_heartbeat,
    claims.check_heartbeat_many,
    claims.check_finish_owner_only,
    claims.check_finish_failed,
    claims.check_finish_forbidden,
    claims.check_finish_stale_owner,
    claims.check_finish_retry,
    claims.check_finish_release,
    claims.check_finish_many,
    claims.check_finish_many_from_claimed,
    tasks.check_due_before,
    tasks.check_ready_listing,
    tasks.check_expired_leases,
    tasks.check_count_by_state,
    tasks.check_tasks_listing,
    tasks.check_delete,
    tasks.check_prune,
    tasks.check_prune_bounded,
    tasks.check_compact_insert,
    tasks.check_inspection,
    tasks.check_retrying,
    tasks.check_count_by_queue,
    tasks.check_by_function,
    dependencies.check_dep_unknown_upstream,
    dependencies.check_dep_unmet_at_insert,
    dependencies.check_dep_all_success,
    dependencies.check_dep_transitive,
    dependencies.check_dep_all_done,
    dependencies.check_dep_any_failed,
    dependencies.check_dep_settled_by_transition,
    dependencies.check_dep_cancelled_dependent_ignored,
    dependencies.check_dep_deleted_upstream_forgotten,
    schedules.check_schedule_put_get,
    schedules.check_schedule_replace,
    schedules.check_schedule_replace_reuses_instance_id,
    schedules.check_schedule_conflict,
    schedules.check_update_schedule,
    schedules.check_delete_schedule,
    schedules.check_last_ended,
)
"""Every check, in the order ``check_store`` runs them."""
