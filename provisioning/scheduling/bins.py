"""Where pods go: existing nodes and the NodeClaims a plan opens."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from provisioning.crd.labels import HOSTNAME
from provisioning.scheduling.pods import Pod
from provisioning.scheduling.pools import PoolModel
from provisioning.scheduling.requirements import Requirements
from provisioning.scheduling.taints import Taint


@dataclass(eq=False)
class Bin:
    """An existing node (``pool`` None) or a planned NodeClaim, with what it already holds."""

    name: str
    requirements: Requirements
    used: np.ndarray
    taints: tuple[Taint, ...]
    pool: PoolModel | None = None  # planned claims
    idx: np.ndarray | None = None  # planned claims: indices of the instance types still possible
    free: np.ndarray | None = None  # existing nodes: allocatable minus what is bound there
    labels: dict[str, str] = field(default_factory=dict)  # existing nodes
    pods: list[Pod] = field(default_factory=list)
    committed: np.ndarray | None = None  # planned claims: capacity counted against limits
    cap: np.ndarray | None = None  # planned claims: the most any remaining type holds, per resource
    ports: set = field(default_factory=set)  # host ports taken: (host IP, protocol, port)
    cheapest: int | None = None  # planned claims: the cheapest of ``idx`` under the requirements
    price: float = 0.0  # ... and its price
    origin: str = ""  # the pod that opened a claim, for explanations
    stale: bool = False  # planned claims: ``idx`` may still hold types too small for ``used``
    min_values_relaxed: bool = False  # planned claims: BestEffort lowered its minValues

    @property
    def existing(self) -> bool:
        return self.pool is None

    @property
    def mask(self) -> np.ndarray | None:
        """``idx`` as a boolean mask over the pool's types."""
        if self.pool is None or self.idx is None:
            return None
        mask = np.zeros(len(self.pool), dtype=bool)
        mask[self.idx] = True
        return mask

    def domain(self, key: str) -> str | None:
        if key == HOSTNAME:
            return self.labels.get(HOSTNAME, self.name) if self.existing else self.name
        if self.existing:
            return self.labels.get(key)
        requirement = self.requirements.get(key)
        if requirement is not None and not requirement.complement and len(requirement.values) == 1:
            return next(iter(requirement.values))
        return None


def port_conflict(pod: Pod, b: Bin) -> bool:
    """Two pods on one node cannot bind the same host port and protocol (an empty or
    0.0.0.0 host IP takes the port on every address)."""
    if not pod.host_ports or not b.ports:
        return False
    return ports_conflict(pod.host_ports, b.ports)


def ports_conflict(wanted, taken) -> bool:
    wide = ("", "0.0.0.0")
    for a in wanted:
        for b in taken:
            if (a.protocol, a.port) == (b.protocol, b.port) and (
                a.host_ip in wide or b.host_ip in wide or a.host_ip == b.host_ip
            ):
                return True
    return False
