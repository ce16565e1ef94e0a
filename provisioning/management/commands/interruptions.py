"""``manage.py interruptions``: the interruption queue's consumer (``KARPWEB_INTERRUPTION_QUEUE``).

One per deployment, as upstream's singleton: replicas elect a leader, through the Lease
``karpweb-interruption`` with a real cluster (as ``cluster_watch`` does), through a lease in
Redis with the simulated one. The leader long-polls the queue (10 messages, 20 s wait, 20 s
visibility) and handles each batch 10 at a time (``services.interruption``); the others wait
to take over. A replica that loses the lead exits, to start again as one that waits.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
import uuid
from collections.abc import Callable

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from karpweb import heartbeat
from provisioning.cloud.base import CloudError
from provisioning.cluster.base import ClusterError

LEASE_NAME = "karpweb-interruption"


class Command(BaseCommand):
    help = "Consume the interruption queue (spot interruptions, scheduled changes, state changes)."

    def add_arguments(self, parser):
        parser.add_argument("--queue", default=None, help="the SQS queue name (default: $KARPWEB_INTERRUPTION_QUEUE)")
        parser.add_argument("--kubeconfig", default=None, help="kubeconfig path, for the Lease of a real cluster")
        parser.add_argument(
            "--wait-without-queue",
            action="store_true",
            help="with no queue set, wait (and keep the heartbeat) instead of failing: a Deployment's pod",
        )

    def handle(self, *args, queue: str | None, kubeconfig: str | None, wait_without_queue: bool, **options):
        from provisioning.services import interruption
        from provisioning.services.cloud import get_cloud

        name = (queue if queue is not None else settings.KARPWEB_INTERRUPTION_QUEUE).strip()
        stopping = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stopping.set())
        if not name:
            message = "no interruption queue: set KARPWEB_INTERRUPTION_QUEUE to the SQS queue's name"
            if not wait_without_queue:
                raise CommandError(message)
            self.stderr.write(f"{message}; waiting")
            while not stopping.wait(5):
                heartbeat.touch()
            return

        def stop() -> bool:
            heartbeat.touch()  # every long poll at least (20 s), so a fresh heartbeat means it cycles
            return stopping.is_set()

        def lead(stopped: Callable[[], bool]) -> None:
            source = get_cloud().interruption_queue(name)
            try:
                url = source.url
            except CloudError as exc:
                raise CommandError(f"interruption queue {name!r}: {exc}") from None
            self.stdout.write(f"consuming interruption queue {url}", ending="\n")
            self.stdout.flush()
            while not stopped():
                try:
                    interruption.consume(source, stopped)
                except CloudError as exc:  # the queue unreachable a moment: try again shortly
                    self.stderr.write(f"interruption queue: {exc}")
                    time.sleep(2)

        election = self.election(kubeconfig, name)
        self.stdout.write(f"waiting to lead through {election.describe()}")
        try:
            lost = election.run(lead, stop)
        except ClusterError as exc:
            raise CommandError(str(exc)) from None
        if lost:
            raise CommandError("lost the lead: another replica may consume now")

    def election(self, kubeconfig: str | None, name: str):
        if settings.KARPWEB_CLUSTER == "kubernetes":
            from provisioning.cluster.kubernetes import KubernetesCluster
            from provisioning.cluster.leaderelection import LeaderElection, own_identity, own_namespace

            election = LeaderElection(
                KubernetesCluster.from_environment(kubeconfig), own_namespace(), own_identity(), name=LEASE_NAME
            )
            election.describe = lambda: f"Lease {election.namespace}/{election.name} as {election.identity}"
            return election
        return RedisLease(f"karpweb:lease:{LEASE_NAME}:{name}")


class RedisLease:
    """A leader lease in Redis for the embedded default (no Lease API there): a lock with a
    15 s timeout, renewed every 5 s; a leader that cannot renew stops leading."""

    def __init__(self, key: str, duration: float = 15.0, renew_every: float = 5.0, retry_every: float = 2.0) -> None:
        from provisioning.services.connections import get_redis

        self.key, self.identity = key, uuid.uuid4().hex
        self.renew_every, self.retry_every = renew_every, retry_every
        self.lock = get_redis().lock(key, timeout=duration, thread_local=False)

    def describe(self) -> str:
        return f"the Redis lease {self.key}"

    def run(self, work: Callable[[Callable[[], bool]], None], stop: Callable[[], bool]) -> bool:
        while not self.lock.acquire(blocking=False):
            if stop():
                return False
            time.sleep(self.retry_every)
        lost, done = threading.Event(), threading.Event()

        def renew() -> None:
            while not done.wait(self.renew_every):
                try:
                    self.lock.reacquire()
                except Exception:
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
                with contextlib.suppress(Exception):  # expired meanwhile: the next leader takes it
                    self.lock.release()
        return lost.is_set()
