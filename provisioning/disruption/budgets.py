"""Disruption budgets: how many of a NodePool's nodes may be disrupted now, for a reason.

As upstream: a budget without a schedule is always active; one with a schedule is active for
``duration`` after each cron hit (UTC). The allowance is the minimum over the active budgets
that name the reason, percentages scaled against the pool's node count and rounded up; nodes
already disrupting use it up. A budget that cannot be read fails closed: it allows nothing.
Expiration is never budgeted.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta

from croniter import croniter

from provisioning.disruption.model import BUDGETED_REASONS, Budget, PoolPolicy
from provisioning.disruption.text import duration, plural

# The macros the NodePool schema admits (upstream's cron parser knows these descriptors).
CRON_MACROS = ("@annually", "@yearly", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
_COUNT = re.compile(r"[0-9]+")
_PERCENT = re.compile(r"(100|[0-9]{1,2})%")


class BudgetError(ValueError):
    """A budget that cannot be evaluated; it allows no disruption."""


def is_active(budget: Budget, now: float) -> bool:
    """Whether the budget applies at ``now``: always without a schedule, else when a cron hit
    happened within the last ``duration_seconds`` (the hit itself included)."""
    if budget.schedule is None and budget.duration_seconds is None:
        return True
    if budget.schedule is None or budget.duration_seconds is None:
        raise BudgetError("schedule and duration must be set together")
    schedule = budget.schedule.strip()
    if not (schedule in CRON_MACROS or len(schedule.split()) == 5):
        raise BudgetError(f"schedule {schedule!r} is not a 5-field cron or one of {', '.join(CRON_MACROS)}")
    window_start = datetime.fromtimestamp(now, UTC) - timedelta(seconds=budget.duration_seconds)
    try:
        next_hit = croniter(schedule, window_start).get_next(datetime)
    except (ValueError, KeyError) as exc:  # croniter's errors derive from ValueError
        raise BudgetError(f"schedule {schedule!r} is not a valid cron: {exc}") from None
    return next_hit.timestamp() <= now


def nodes_allowed(budget: Budget, total_nodes: int) -> int:
    """``nodes`` as a count: "5" is 5, "10%" of 11 nodes is 2 (rounded up, as a PDB's maxUnavailable)."""
    if _COUNT.fullmatch(budget.nodes):
        return int(budget.nodes)
    if _PERCENT.fullmatch(budget.nodes):
        return math.ceil(int(budget.nodes[:-1]) * total_nodes / 100)
    raise BudgetError(f"nodes {budget.nodes!r} is neither a count nor a percent from 0% to 100%")


def limit(pool: PoolPolicy, reason: str, total_nodes: int, now: float) -> tuple[int | None, str]:
    """The fewest nodes an active budget for ``reason`` allows (None: no active budget limits
    it), and the text of that budget for people."""
    if reason not in BUDGETED_REASONS:
        return None, f"{reason} is not subject to budgets"
    fewest: int | None = None
    why = "no active budget limits it"
    for budget in pool.budgets:
        if not budget.applies_to(reason):
            continue
        try:
            if not is_active(budget, now):
                continue
            count = nodes_allowed(budget, total_nodes)
            text = describe_budget(budget)
            if budget.nodes.endswith("%"):
                text += f" of {plural(total_nodes, 'node')} = {count}"
        except BudgetError as exc:
            count, text = 0, f"{describe_budget(budget)} cannot be read ({exc}), so it allows none"
        if fewest is None or count < fewest:
            fewest, why = count, text
    return fewest, why


def allowed(pool: PoolPolicy, reason: str, total_nodes: int, disrupting_now: int, now: float) -> int:
    """How many more of the pool's nodes may be disrupted for ``reason`` now.

    ``total_nodes`` counts the pool's initialized nodes; ``disrupting_now`` those already being
    disrupted. Without an active budget for the reason, every node may go.
    """
    fewest, _ = limit(pool, reason, total_nodes, now)
    ceiling = total_nodes if fewest is None else fewest
    return max(ceiling - disrupting_now, 0)


def explain(
    pool: PoolPolicy, reason: str, total_nodes: int, disrupting_now: int, now: float, *, chosen: int = 0
) -> str:
    """``NodePool general allows 0 more Underutilized disruptions now: budget nodes "10%" of 4
    nodes = 1, 1 already disrupting``; ``chosen`` counts the nodes this round already picked."""
    fewest, why = limit(pool, reason, total_nodes, now)
    left = allowed(pool, reason, total_nodes, disrupting_now + chosen, now)
    text = f"NodePool {pool.name} allows {left} more {reason} disruption{'' if left == 1 else 's'} now: {why}"
    if fewest is not None:
        if disrupting_now:
            text += f", {disrupting_now} already disrupting"
        if chosen:
            text += f", {chosen} chosen this round"
    return text


def describe_budget(budget: Budget) -> str:
    """``budget nodes "0" (schedule "0 9 * * 1-5" for 8h, reasons Drifted)``."""
    details = []
    if budget.schedule is not None:
        window = f" for {duration(budget.duration_seconds)}" if budget.duration_seconds is not None else ""
        details.append(f'schedule "{budget.schedule}"{window}')
    if budget.reasons is not None:
        details.append(f"reasons {', '.join(budget.reasons)}")
    suffix = f" ({'; '.join(details)})" if details else ""
    return f'budget nodes "{budget.nodes}"{suffix}'
