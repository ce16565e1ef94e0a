"""Leader election through a coordination.k8s.io/v1 Lease, as client-go's ``leaderelection``:
one replica of ``cluster_watch`` works, the others wait for its lease to expire.

The leader renews the Lease every ``renew_every`` seconds with a conditional update (the
resourceVersion it read), so two candidates never both win the same round. A candidate judges
expiry by its own clock: a Lease whose content has not changed for ``leaseDurationSeconds``
since this process first saw it is free, whatever the holder's clock says. The leader that
cannot renew for ``renew_deadline`` seconds stops leading before anyone may take over.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from provisioning.cluster.base import ClusterError, Conflict, Manifest
from provisioning.cluster.kubernetes import KubernetesCluster, _sleep

log = logging.getLogger(__name__)

LEASE_NAME = "karpweb-cluster-watch"
# controller-runtime's default lease duration; the leader renews three times within it and
# gives up leading 5 s before another replica may take over.
LEASE_DURATION = 15.0
RENEW_EVERY = 5.0
RENEW_DEADLINE = 10.0
RETRY_EVERY = 2.0  # how often a waiting replica tries again (client-go's default retry period)
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def own_namespace() -> str:
    """The namespace this pod runs in: $POD_NAMESPACE (the downward API), else the service
    account's, else "default" (a run from a workstation)."""
    if namespace := os.environ.get("POD_NAMESPACE"):
        return namespace
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or "default"
    except OSError:
        return "default"


def own_identity() -> str:
    """Unique per process, readable in the Lease: the pod's name and a random suffix."""
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")  # a MicroTime


class LeaderElection:
    def __init__(
        self,
        cluster: KubernetesCluster,
        namespace: str,
        identity: str,
        *,
        name: str = LEASE_NAME,
        duration: float = LEASE_DURATION,
        renew_every: float = RENEW_EVERY,
        renew_deadline: float = RENEW_DEADLINE,
        retry_every: float = RETRY_EVERY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cluster = cluster
        self.namespace, self.name, self.identity = namespace, name, identity
        self.duration, self.renew_every, self.renew_deadline = duration, renew_every, renew_deadline
        self.retry_every = retry_every
        self._clock = clock
        self._seen: Manifest | None = None  # the Lease's spec as last seen, and since when
        self._seen_at = 0.0
        self._lease: Manifest | None = None  # as last read or written by this process

    def try_acquire_or_renew(self) -> bool:
        """One round: True when this process holds the Lease now. Failures that retrying may
        mend count as a lost round; others (say, 403 Forbidden) are raised."""
        try:
            return self._round()
        except Conflict as exc:
            log.info("leader election: %s", exc)
            return False
        except ClusterError as exc:
            if not exc.retryable:
                raise
            log.warning("leader election: %s", exc)
            return False

    def _round(self) -> bool:
        now = self._clock()
        lease = self.cluster.read_lease(self.namespace, self.name)
        if lease is None:
            lease = {"metadata": {"name": self.name, "namespace": self.namespace}, "spec": {"leaseTransitions": 0}}
        spec = lease.get("spec") or {}
        if spec != self._seen:
            self._seen, self._seen_at = spec, now
        holder = spec.get("holderIdentity") or ""
        duration = float(spec.get("leaseDurationSeconds") or self.duration)
        if holder and holder != self.identity and now < self._seen_at + duration:
            return False
        stamp = _now()
        taken = {"holderIdentity": self.identity, "leaseDurationSeconds": int(self.duration), "renewTime": stamp}
        if holder != self.identity:
            transitions = int(spec.get("leaseTransitions") or 0)
            created = "resourceVersion" not in lease["metadata"]
            taken |= {"acquireTime": stamp, "leaseTransitions": transitions if created else transitions + 1}
        self._lease = self.cluster.write_lease({**lease, "spec": {**spec, **taken}})
        self._seen, self._seen_at = self._lease.get("spec") or {}, now
        if holder != self.identity:
            log.info("leader election: %s now leads through Lease %s/%s", self.identity, self.namespace, self.name)
        return True

    def release(self) -> None:
        """Give the Lease up at once (an empty holder), so the next leader need not wait for it
        to expire; best effort."""
        if self._lease is None:
            return
        spec = {**(self._lease.get("spec") or {}), "holderIdentity": None, "leaseDurationSeconds": 1}
        try:
            self.cluster.write_lease({**self._lease, "spec": spec})
        except ClusterError as exc:  # taken meanwhile, or unreachable: it expires on its own
            log.warning("leader election: releasing the Lease failed: %s", exc)
        self._lease = None

    def run(self, work: Callable[[Callable[[], bool]], None], stop: Callable[[], bool]) -> bool:
        """Wait until this process leads, then call ``work(stopped)`` while a thread renews the
        Lease; ``stopped()`` turns true when ``stop()`` does or the lead is lost. The Lease is
        released when ``work`` returns. Returns True when the lead was lost."""
        while not self.try_acquire_or_renew():
            _sleep(self.retry_every, stop)
            if stop():
                return False
        lost, done = threading.Event(), threading.Event()

        def renew() -> None:
            renewed = self._clock()
            while not done.wait(self.renew_every):
                if self.try_acquire_or_renew():
                    renewed = self._clock()
                elif self._clock() - renewed >= self.renew_deadline:
                    log.error(
                        "leader election: the Lease was not renewed for %.0f s; no longer leading", self.renew_deadline
                    )
                    lost.set()
                    return

        renewer = threading.Thread(target=renew, name="lease", daemon=True)
        renewer.start()
        try:
            work(lambda: lost.is_set() or stop())
        finally:
            done.set()
            renewer.join()
            if not lost.is_set():
                self.release()
        return lost.is_set()
