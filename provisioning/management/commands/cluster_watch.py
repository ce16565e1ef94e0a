"""``manage.py cluster_watch``: mirror a real cluster (``KARPWEB_CLUSTER=kubernetes``) into the
database: Pods, Nodes, NodePools, EC2NodeClasses and NodeOverlays, listed then watched (a relist on 410).
Runs in-cluster or with ``--kubeconfig``. Replicas elect a leader through the Lease
``karpweb-cluster-watch`` in their namespace: only the leader syncs and watches, the others wait
to take over. A replica that loses the lead exits, to start again as one that waits."""

from __future__ import annotations

import signal
import threading

from django.core.management.base import BaseCommand, CommandError
from django.db import close_old_connections

from karpweb import heartbeat
from provisioning.cluster.base import ClusterError, Event

KINDS = ("NodePool", "EC2NodeClass", "NodeOverlay", "Node", "Pod")


class Command(BaseCommand):
    help = "Mirror Pods, Nodes, NodePools, EC2NodeClasses and NodeOverlays of a real cluster into the database."

    def add_arguments(self, parser):
        parser.add_argument("--kubeconfig", default=None, help="kubeconfig path (default: in-cluster, $KUBECONFIG)")
        parser.add_argument("--no-reconcile", action="store_true", help="skip the start-up two-way policy sync")

    def handle(self, *args, kubeconfig: str | None, no_reconcile: bool, **options):
        from provisioning.cluster.kubernetes import KubernetesCluster
        from provisioning.cluster.leaderelection import LeaderElection, own_identity, own_namespace
        from provisioning.services import crdsync, mirror

        try:
            cluster = KubernetesCluster.from_environment(kubeconfig)
        except ClusterError as exc:
            raise CommandError(str(exc)) from None
        stopping = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stopping.set())

        def handle(event: Event) -> None:
            close_old_connections()  # watch threads outlive connections
            try:
                mirror.handle(event)
            finally:
                close_old_connections()

        def stop() -> bool:
            # Every watch thread asks between events and at least once per watch request (10 s),
            # and a replica waiting for the lead asks every 0.1 s, so a fresh heartbeat means
            # the process still cycles.
            heartbeat.touch()
            return stopping.is_set()

        def lead(stopped) -> None:
            if not no_reconcile:
                for result in crdsync.reconcile(cluster):
                    self.stdout.write(str(result))
            self.stdout.write(f"watching {', '.join(KINDS)}")
            cluster.watch(handle, KINDS, stopped)

        election = LeaderElection(cluster, own_namespace(), own_identity())
        self.stdout.write(f"waiting to lead through Lease {election.namespace}/{election.name} as {election.identity}")
        try:
            lost = election.run(lead, stop)
        except ClusterError as exc:
            raise CommandError(str(exc)) from None
        if lost:
            raise CommandError("lost the lead: another replica may watch now")
