"""Where pods and nodes live: a real cluster (``kubernetes.py``) or the embedded simulated one
(``simulated.py``), behind one ``Cluster`` protocol (``base.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from provisioning.cluster.base import Cluster


def get_cluster() -> Cluster:
    """The configured cluster (``KARPWEB_CLUSTER``): simulated, or a real one."""
    from django.conf import settings

    if settings.KARPWEB_CLUSTER == "kubernetes":
        from provisioning.cluster.kubernetes import KubernetesCluster

        return KubernetesCluster.from_environment()
    from provisioning.cluster.simulated import SimulatedCluster

    return SimulatedCluster()
