"""PURE disruption planners: expiration, emptiness, drift, multi- and single-node
consolidation, and budgets. They simulate with THE solver and take the clock as an argument;
no Django, boto3, kubernetes or redis import in here, ever."""

from provisioning.disruption.budgets import allowed
from provisioning.disruption.model import (
    BALANCED,
    DRIFTED,
    EMPTY,
    EXPIRED,
    UNDERUTILIZED,
    WHEN_EMPTY,
    WHEN_EMPTY_OR_UNDERUTILIZED,
    Budget,
    Candidate,
    Command,
    DisruptionPlan,
    PoolPolicy,
)
from provisioning.disruption.planner import plan

__all__ = [
    "BALANCED",
    "DRIFTED",
    "EMPTY",
    "EXPIRED",
    "UNDERUTILIZED",
    "WHEN_EMPTY",
    "WHEN_EMPTY_OR_UNDERUTILIZED",
    "Budget",
    "Candidate",
    "Command",
    "DisruptionPlan",
    "PoolPolicy",
    "allowed",
    "plan",
]
