"""``manage.py cluster_watch``: mirror a real cluster (``KARPWEB_CLUSTER=kubernetes``) into the
database: Pods, Nodes, NodePools and EC2NodeClasses, listed then watched (a relist on 410).
Runs in-cluster or with ``--kubeconfig``; one replica (the ``karpweb-watch`` Deployment)."""

from __future__ import annotations

import signal
import threading

from django.core.management.base import BaseCommand, CommandError
from django.db import close_old_connections

from karpweb import heartbeat
from provisioning.cluster.base import ClusterError, Event

KINDS = ("NodePool", "EC2NodeClass", "Node", "Pod")


class Command(BaseCommand):
    help = "Mirror Pods, Nodes, NodePools and EC2NodeClasses of a real cluster into the database."

    def add_arguments(self, parser):
        parser.add_argument("--kubeconfig", default=None, help="kubeconfig path (default: in-cluster, $KUBECONFIG)")
        parser.add_argument("--no-reconcile", action="store_true", help="skip the start-up two-way policy sync")

    def handle(self, *args, kubeconfig: str | None, no_reconcile: bool, **options):
        from provisioning.cluster.kubernetes import KubernetesCluster
        from provisioning.services import crdsync, mirror

        try:
            cluster = KubernetesCluster.from_environment(kubeconfig)
        except ClusterError as exc:
            raise CommandError(str(exc)) from None
        stopping = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stopping.set())
        if not no_reconcile:
            for result in crdsync.reconcile(cluster):
                self.stdout.write(str(result))

        def handle(event: Event) -> None:
            close_old_connections()  # watch threads outlive connections
            try:
                mirror.handle(event)
            finally:
                close_old_connections()

        def stop() -> bool:
            # Every watch thread asks between events and at least once per watch request (10 s),
            # so a fresh heartbeat means the watches still cycle.
            heartbeat.touch()
            return stopping.is_set()

        self.stdout.write(f"watching {', '.join(KINDS)}")
        try:
            cluster.watch(handle, KINDS, stop)
        except ClusterError as exc:
            raise CommandError(str(exc)) from None
