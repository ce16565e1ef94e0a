"""What the solver is given: pending pods, NodePools with their instance types, the nodes
that exist (or are in flight), DaemonSets, and the budget."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from provisioning.scheduling.instancetypes import InstanceType
from provisioning.scheduling.pods import Pod
from provisioning.scheduling.requirements import Requirements
from provisioning.scheduling.taints import Taint
from provisioning.scheduling.workloads import DaemonSetOverhead, ExistingNode


@dataclass(frozen=True)
class NodePoolInput:
    """A NodePool as the solver sees it: requirements (template requirements and labels),
    taints, limits and what its nodes already use, and the instance types of its
    EC2NodeClass with their offerings (unavailable ones already marked)."""

    name: str
    requirements: Requirements
    instance_types: tuple[InstanceType, ...]
    weight: int = 0
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    startup_taints: tuple[Taint, ...] = ()
    limits: Mapping[str, int] = field(default_factory=dict)  # cpu (m), memory (bytes), nodes, ...
    in_use: Mapping[str, int] = field(default_factory=dict)  # capacity of its existing nodes, and "nodes"
    nodeclass: str = ""
    annotations: Mapping[str, str] = field(default_factory=dict)  # spec.template.metadata.annotations


@dataclass(frozen=True)
class StaticPool:
    """A static NodePool (``spec.replicas``): the solver never places pods on new claims of
    it, but its nodes exist, and ``provisioning.scheduling.static`` keeps ``replicas`` of them."""

    pool: NodePoolInput
    replicas: int


@dataclass(frozen=True)
class Snapshot:
    pods: tuple[Pod, ...]
    nodepools: tuple[NodePoolInput, ...]
    nodes: tuple[ExistingNode, ...] = ()
    daemonsets: tuple[DaemonSetOverhead, ...] = ()
    deadline_seconds: float = 60.0
    max_instance_types: int = 60
    optimize: bool = True  # False: upstream's greedy packing only (the baseline of bench/solver.py)
    # Namespace → its labels, for namespaceSelectors of pod (anti-)affinity terms; a namespace
    # not listed has only its ``kubernetes.io/metadata.name`` label.
    namespaces: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # Upstream's --preference-policy: Respect (preferences count until relaxed) or Ignore.
    preference_policy: str = "Respect"
    # Upstream's --min-values-policy: Strict (a claim meets every minValues or is not made) or
    # BestEffort (minValues are relaxed as far as needed, and the claim says so).
    min_values_policy: str = "Strict"
    # The static NodePools, kept apart from ``nodepools``: no pod opens a claim of one.
    static_nodepools: tuple[StaticPool, ...] = ()
