"""Recurrence rules: cron expressions in a time zone, fixed intervals, misfire and overlap policies.

A recurring schedule stores its **rule**, never its future instances. The scheduler asks the rule
for the first fire instant strictly after the previous scheduled slot (:meth:`Rule.next_after`);
instants are floats of UTC seconds since the Unix epoch, and the instants a rule returns for a
chain of calls are strictly increasing. This package owns rules, never timers: it reads no clock
and imports nothing of the package but :mod:`timewheel.errors` and its cron expression parser,
:mod:`timewheel._cronexpr`.

Cron (:class:`CronRule`)
    Five fields ``minute hour day-of-month month day-of-week``, or six with the **seconds field
    last** (``minute hour day-of-month month day-of-week second``, croniter's order), or one of the
    aliases ``@yearly @annually @monthly @weekly @daily @midnight @hourly``. The expression is
    evaluated on the wall clock of a :mod:`zoneinfo` zone (default UTC) by croniter, which does
    the calendar arithmetic on naive local times; :mod:`timewheel.rules.cron` maps those local
    times to UTC itself, following Vixie cron across DST changes:

    * a **fixed-time** job is one whose minute and hour fields both do not start with ``*``
      (``30 2 * * *``, ``0 9-17 * * *``, ``@daily``). A local time of a fixed-time job that falls
      in a skipped interval (spring forward) fires once, at the first instant after the gap
      (``30 2 * * *`` in New York on 2026-03-08 fires at 03:00 EDT = 07:00 UTC). A local time in
      a repeated interval (fall back) fires once, in the first pass (``30 1 * * *`` on
      2026-11-01 fires at 01:30 EDT = 05:30 UTC, not again at 01:30 EST).
    * a **wildcard** job (minute or hour field starts with ``*``: ``* * * * *``, ``*/15 * * * *``,
      ``30 * * * *``, ``@hourly``) fires at every instant whose local time matches: local times
      in a skipped interval do not exist and never fire, and a repeated interval fires in both
      passes (``* * * * *`` fires 1,380 times on the New York spring-forward day and 1,500 times
      on the fall-back day; ``0 * * * *`` fires 23 and 25 times).

    Several local times that land on the same instant (``0,30 2 * * *`` on a spring-forward day)
    fire once. Day-of-month and day-of-week combine as in Vixie cron: if either field starts with
    ``*`` both must match, otherwise either may match, ``#n`` and ``nL`` days included
    (``0 0 15 * fri#2`` fires on the 15th and on every second Friday). A list item ``*`` makes
    its field every value (``*,5`` is ``*``).

    Expressions are validated at construction: a malformed field raises
    :class:`~timewheel.errors.InvalidScheduleError` naming the field, the reason and the way out;
    an expression that can never fire (``0 0 30 2 *``) is refused; so are spellings that
    croniter 7 reads differently from classic cron (``5-5``, which croniter 7 expands to the
    whole field, and ``6/1`` in the day-of-week field, which classic cron reads as Saturday and
    Sunday and croniter 7 as Saturday only), spellings of other cron dialects (``L-3``,
    ``MON-FRI#1``, ``H``, ``R``, ``CRON_TZ=``, a year field) and non-ASCII characters. Parsing
    and validation live in :mod:`timewheel._cronexpr`.

Intervals (:class:`IntervalRule`)
    Slots at ``start + k * every`` in elapsed UTC seconds, computed by multiplication, so they
    never drift, however late each run starts or finishes.

Jitter is not part of a slot: :meth:`Rule.jittered` spreads the actual run time, while the next
slot is computed from the unjittered one.

Misfires (:class:`Misfire`, :func:`plan_misfires`) and overlap (:class:`Overlap`) are policy
values plus one pure decision function; the scheduler applies them.
"""

from timewheel.rules.base import Rule, parse_every, resolve_zone
from timewheel.rules.cron import SHARED_SLOTS, CronRule, CronSlots, cron_slots
from timewheel.rules.interval import IntervalRule
from timewheel.rules.policies import (
    DEFAULT_SKIP_GRACE,
    Misfire,
    MisfirePlan,
    Overlap,
    plan_misfires,
    runs_alone,
)
from timewheel.rules.spec import RuleCache, make_rule, rule_from_spec

__all__ = [
    "DEFAULT_SKIP_GRACE",
    "SHARED_SLOTS",
    "CronRule",
    "CronSlots",
    "IntervalRule",
    "Misfire",
    "MisfirePlan",
    "Overlap",
    "Rule",
    "RuleCache",
    "cron_slots",
    "make_rule",
    "parse_every",
    "plan_misfires",
    "resolve_zone",
    "rule_from_spec",
    "runs_alone",
]
