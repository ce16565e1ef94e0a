"""``manage.py seed_demo``: the demo policies for an empty platform (``make run`` only): the
EC2NodeClasses, NodePools (one static: ``system``, two replicas) and NodeOverlay of
``demo/policies.yaml``; the demo PodDisruptionBudget when the cluster is the simulated one; and,
with the simulated AWS, the demo's capacity reservation (each run: the simulated AWS keeps
nothing between runs)."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand

from provisioning.crd.manifest import load_documents
from provisioning.models import AuditEntry, EC2NodeClass, NodeOverlay, NodePool
from provisioning.services import demo
from provisioning.services.policy import apply_manifest

DEMO = Path(__file__).resolve().parents[2] / "demo" / "policies.yaml"


class Command(BaseCommand):
    help = (
        "Seed the demo EC2NodeClass, NodePools (one static) and NodeOverlay (and the simulated cluster's demo "
        "PodDisruptionBudget) into a platform that has never had policies."
    )

    def handle(self, *args, **options):
        if settings.KARPWEB_AWS == "simulated":
            # The simulated AWS starts empty each time: its reservation is made again.
            self.stdout.write(demo.seed_reservation())
        # A platform with any policy history is left alone: deleting the demo sticks.
        if not any(m.objects.exists() for m in (NodePool, EC2NodeClass, NodeOverlay, AuditEntry)):
            for doc in load_documents(DEMO.read_bytes(), source=str(DEMO)):
                applied = apply_manifest(doc, source="system", actor="demo")
                self.stdout.write(f"Seeded demo {doc['kind']} {applied.obj.name}")
            if settings.KARPWEB_CLUSTER == "simulated":
                for key, _ in demo.seed_budget():
                    self.stdout.write(f"Seeded demo PodDisruptionBudget {key}")
        if settings.KARPWEB_AWS == "simulated":
            # The reservations as the simulated AWS has them now, before the first provisioning
            # run (the beat resolves every minute): the demo's GPU pods go to the reservation
            # from the start, and a restart does not read the last run's counts.
            for name in demo.resolve_reservations():
                self.stdout.write(f"Resolved the capacity reservations of EC2NodeClass {name}")
