"""Two-way sync of NodePools and EC2NodeClasses: kubectl changes reach the database, browser
and REST changes reach the cluster, and a change made on both sides is a conflict that
overwrites neither.

The cluster here is an in-memory stand-in for the three calls the sync makes, with the API
server's concurrency rules (tests/test_cluster_kubernetes.py covers the real client over
HTTP). It also plays kubectl and the Karpenter controller, and returns the watch event each
of their changes produces, so a test decides when the watch delivers it.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from provisioning.cluster.base import Conflict, Event
from provisioning.models import RESOURCE_MODELS, AuditEntry, EC2NodeClass, NodePool
from provisioning.services.crdsync import SYNC, digest, export_change, import_event, reconcile
from provisioning.services.policy import apply_manifest, delete_resource

pytestmark = pytest.mark.django_db

Manifest = dict[str, Any]


class FakeCluster:
    """NodePools and EC2NodeClasses in memory. Every write takes the next resourceVersion; a
    replace based on a stale version, a create of a name that exists and a conditional
    delete of a changed object are refused with the current object, as the API server does."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], Manifest] = {}
        self.revision = 100
        self.sent: list[Manifest] = []  # the bodies the sync wrote, as it sent them
        self.deletes: list[tuple[str, str, str | None]] = []

    # -- the calls the sync makes

    def list_custom(self, kind: str) -> tuple[list[Manifest], str]:
        items = [copy.deepcopy(obj) for (k, _), obj in sorted(self.objects.items()) if k == kind]
        return items, str(self.revision)

    def apply_custom(self, manifest: Manifest) -> Manifest:
        self.sent.append(copy.deepcopy(manifest))
        current = self.objects.get(_key(manifest))
        based_on = manifest["metadata"].get("resourceVersion")
        if based_on and current is None:
            raise Conflict(f"{_name(manifest)} was deleted from the cluster")
        if based_on and current["metadata"]["resourceVersion"] != based_on:
            raise Conflict(f"{_name(manifest)} changed in the cluster", current=copy.deepcopy(current))
        if not based_on and current is not None:
            raise Conflict(f"{_name(manifest)} already exists in the cluster", current=copy.deepcopy(current))
        return copy.deepcopy(self._write(manifest))

    def delete_custom(self, kind: str, name: str, resource_version: str | None = None) -> None:
        self.deletes.append((kind, name, resource_version))
        current = self.objects.get((kind, name))
        if current is not None and resource_version and current["metadata"]["resourceVersion"] != resource_version:
            raise Conflict(f"{kind} {name} changed in the cluster", current=copy.deepcopy(current))
        self.objects.pop((kind, name), None)

    # -- what others do in the cluster; each returns the event the watch will deliver

    def kubectl_apply(self, manifest: Manifest) -> Event:
        existed = _key(manifest) in self.objects
        stored = self._write(manifest)
        return Event("MODIFIED" if existed else "ADDED", stored["kind"], copy.deepcopy(stored))

    def kubectl_edit(self, kind: str, name: str, change: Callable[[Manifest], None]) -> Event:
        manifest = copy.deepcopy(self.objects[(kind, name)])
        change(manifest)
        return self.kubectl_apply(manifest)

    def controller_writes_status(self, kind: str, name: str, status: Manifest) -> Event:
        stored = self.objects[(kind, name)]
        stored["status"] = status
        stored["metadata"]["resourceVersion"] = self._next()
        return Event("MODIFIED", kind, copy.deepcopy(stored))

    def kubectl_delete(self, kind: str, name: str) -> Event:
        return Event("DELETED", kind, self.objects.pop((kind, name)))

    # -- plumbing

    def _write(self, manifest: Manifest) -> Manifest:
        current = self.objects.get(_key(manifest))
        meta = {k: v for k, v in manifest["metadata"].items() if k in ("name", "labels", "annotations")}
        meta["uid"] = current["metadata"]["uid"] if current else str(uuid.uuid4())
        meta["resourceVersion"] = self._next()
        stored = {"apiVersion": manifest["apiVersion"], "kind": manifest["kind"], "metadata": meta}
        stored["spec"] = copy.deepcopy(manifest.get("spec") or {})
        # Status is a subresource: a write of the object leaves it as it was.
        stored["status"] = copy.deepcopy(current["status"]) if current else {}
        self.objects[_key(manifest)] = stored
        return stored

    def _next(self) -> str:
        self.revision += 1
        return str(self.revision)


def _key(manifest: Manifest) -> tuple[str, str]:
    return manifest["kind"], manifest["metadata"]["name"]


def _name(manifest: Manifest) -> str:
    return f"{manifest['kind']} {manifest['metadata']['name']}"


@pytest.fixture
def cluster() -> FakeCluster:
    return FakeCluster()


@pytest.fixture
def synced(cluster, seed_ec2nodeclass) -> EC2NodeClass:
    """The seed EC2NodeClass, applied with kubectl and imported from the watch."""
    assert import_event(cluster.kubectl_apply(seed_ec2nodeclass)).action == "created"
    return EC2NodeClass.objects.get()


def edit_in_browser(kind: str, name: str, change: Callable[[Manifest], None]) -> None:
    manifest = RESOURCE_MODELS[kind].objects.get(name=name).to_manifest()
    change(manifest)
    expected = manifest["metadata"]["resourceVersion"]
    apply_manifest(manifest, source="ui", actor="alice", expected_version=expected)


def set_role(role: str) -> Callable[[Manifest], None]:
    def change(manifest: Manifest) -> None:
        manifest["spec"]["role"] = role

    return change


def role_in_cluster(cluster: FakeCluster) -> str:
    return cluster.objects["EC2NodeClass", "default"]["spec"]["role"]


def role_in_database() -> str:
    return EC2NodeClass.objects.get(name="default").spec["role"]


def audit() -> list[tuple[str, str]]:
    return [(e.action, e.source) for e in AuditEntry.objects.order_by("id")]


# -- cluster to database


def test_a_kubectl_apply_is_stored_with_its_source_and_the_cluster_version(cluster, synced):
    theirs = cluster.objects["EC2NodeClass", "default"]
    assert str(synced.uid) == theirs["metadata"]["uid"]
    assert synced.status[SYNC]["clusterResourceVersion"] == theirs["metadata"]["resourceVersion"]
    assert synced.spec["metadataOptions"]["httpTokens"] == "required"  # stored with its defaults
    assert audit() == [("created", "kubectl")]


def test_the_same_object_again_or_a_status_write_makes_no_audit_noise(cluster, synced, seed_ec2nodeclass):
    assert import_event(cluster.kubectl_apply(seed_ec2nodeclass)).action == "unchanged"
    ready = {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready"}]}
    assert import_event(cluster.controller_writes_status("EC2NodeClass", "default", ready)).action == "unchanged"
    stored = EC2NodeClass.objects.get()
    assert stored.ready_condition["status"] == "True"  # the cluster's status is mirrored
    assert stored.status[SYNC]["clusterResourceVersion"] == str(cluster.revision)
    assert stored.resource_version == 1  # bookkeeping is no edit: a person's open form stays valid
    assert audit() == [("created", "kubectl")]


def test_a_kubectl_edit_updates_the_database_and_the_diff_shows_only_the_edit(cluster, synced):
    result = import_event(cluster.kubectl_edit("EC2NodeClass", "default", set_role("OtherRole")))
    assert result.action == "updated"
    assert role_in_database() == "OtherRole"
    assert audit() == [("created", "kubectl"), ("updated", "kubectl")]
    diff = AuditEntry.objects.order_by("id").last().diff
    changed = [line for line in diff.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    assert changed == ["-  role: KarpenterNodeRole-my-cluster", "+  role: OtherRole"]
    assert EC2NodeClass.objects.get().status[SYNC]["clusterResourceVersion"] == str(cluster.revision)


def test_invalid_objects_from_the_cluster_are_reported_and_not_stored(cluster, seed_nodepool):
    seed_nodepool["spec"]["weight"] = 0
    result = import_event(cluster.kubectl_apply(seed_nodepool))
    assert result.action == "invalid"
    assert "NodePool/general is invalid" in result.message
    assert "spec.weight: Invalid value: 0: should be greater than or equal to 1" in result.message
    assert result.cluster["spec"]["weight"] == 0
    assert not NodePool.objects.exists() and not AuditEntry.objects.exists()


def test_a_deletion_in_the_cluster_removes_the_database_copy(cluster, synced):
    assert import_event(cluster.kubectl_delete("EC2NodeClass", "default")).action == "deleted"
    assert not EC2NodeClass.objects.exists()
    assert audit() == [("created", "kubectl"), ("deleted", "kubectl")]


def test_a_deletion_in_the_cluster_keeps_database_edits_not_yet_exported(cluster, synced):
    edit_in_browser("EC2NodeClass", "default", set_role("AliceRole"))
    result = import_event(cluster.kubectl_delete("EC2NodeClass", "default"))
    assert result.conflict
    assert "changes not yet exported; kept" in result.message
    assert result.database["spec"]["role"] == "AliceRole" and result.cluster is None
    assert role_in_database() == "AliceRole"


def test_events_of_other_kinds_are_ignored():
    result = import_event(Event("MODIFIED", "Node", {"metadata": {"name": "ip-10-0-1-1"}}))
    assert result.action == "ignored"


# -- database to cluster


def test_a_browser_edit_is_exported_on_the_version_last_seen(cluster, synced):
    seen = cluster.objects["EC2NodeClass", "default"]["metadata"]["resourceVersion"]
    edit_in_browser("EC2NodeClass", "default", set_role("AliceRole"))
    result = export_change("EC2NodeClass", "default", cluster)
    assert result.action == "exported"
    assert role_in_cluster(cluster) == "AliceRole"
    (sent,) = cluster.sent
    assert sent["metadata"] == {"name": "default", "resourceVersion": seen}  # no uid, no generation
    assert "status" not in sent
    stored = EC2NodeClass.objects.get()
    assert stored.status[SYNC]["clusterResourceVersion"] == str(cluster.revision)
    # The watch then delivers the write back: nothing to do, nothing audited.
    echo = Event("MODIFIED", "EC2NodeClass", copy.deepcopy(cluster.objects["EC2NodeClass", "default"]))
    assert import_event(echo).action == "unchanged"
    assert audit() == [("created", "kubectl"), ("updated", "ui")]


def test_an_edit_on_both_sides_is_a_conflict_that_overwrites_neither(cluster, synced):
    kubectl_change = cluster.kubectl_edit("EC2NodeClass", "default", set_role("BobRole"))  # not yet delivered
    edit_in_browser("EC2NodeClass", "default", set_role("AliceRole"))
    result = export_change("EC2NodeClass", "default", cluster)
    assert result.conflict
    assert result.message == "changed in the database and in the cluster since they last agreed"
    assert result.database["spec"]["role"] == "AliceRole"
    assert result.cluster["spec"]["role"] == "BobRole"
    assert (role_in_database(), role_in_cluster(cluster)) == ("AliceRole", "BobRole")
    # When the watch delivers kubectl's change, it is the same conflict.
    assert import_event(kubectl_change).conflict
    assert role_in_database() == "AliceRole"


def test_an_export_takes_the_clusters_change_when_the_database_was_not_edited(cluster, synced):
    cluster.kubectl_edit("EC2NodeClass", "default", set_role("BobRole"))  # the watch is behind
    result = export_change("EC2NodeClass", "default", cluster)  # say, a task run twice
    assert result.action == "updated"
    assert (role_in_database(), role_in_cluster(cluster)) == ("BobRole", "BobRole")
    assert audit() == [("created", "kubectl"), ("updated", "kubectl")]


def test_a_status_write_in_the_cluster_does_not_hold_up_an_export(cluster, synced):
    cluster.controller_writes_status("EC2NodeClass", "default", {"conditions": []})  # not yet delivered
    edit_in_browser("EC2NodeClass", "default", set_role("AliceRole"))
    assert export_change("EC2NodeClass", "default", cluster).action == "exported"
    assert role_in_cluster(cluster) == "AliceRole"
    assert len(cluster.sent) == 2  # refused on the old version, then written on the new one


def test_an_import_while_an_edit_awaits_export_keeps_the_edit(cluster, synced):
    edit_in_browser("EC2NodeClass", "default", set_role("AliceRole"))
    status_write = cluster.controller_writes_status("EC2NodeClass", "default", {"conditions": []})
    result = import_event(status_write)
    assert result.action == "pending"
    assert role_in_database() == "AliceRole"
    assert export_change("EC2NodeClass", "default", cluster).action == "exported"
    assert len(cluster.sent) == 1  # the import noted the cluster's new version


def test_a_new_database_object_is_created_in_the_cluster(cluster, seed_ec2nodeclass):
    apply_manifest(seed_ec2nodeclass, source="rest", actor="alice")
    assert export_change("EC2NodeClass", "default", cluster).action == "exported"
    (sent,) = cluster.sent
    assert "resourceVersion" not in sent["metadata"]
    theirs = cluster.objects["EC2NodeClass", "default"]
    assert theirs["spec"]["role"] == "KarpenterNodeRole-my-cluster"
    sync = EC2NodeClass.objects.get().status[SYNC]
    assert sync["clusterResourceVersion"] == theirs["metadata"]["resourceVersion"]
    assert sync["clusterUid"] == theirs["metadata"]["uid"]


def test_a_new_database_object_does_not_replace_one_of_its_name_in_the_cluster(cluster, seed_ec2nodeclass):
    cluster.kubectl_apply({**seed_ec2nodeclass, "spec": {**seed_ec2nodeclass["spec"], "role": "BobRole"}})
    apply_manifest(seed_ec2nodeclass, source="ui", actor="alice")
    result = export_change("EC2NodeClass", "default", cluster)
    assert result.conflict
    assert (role_in_database(), role_in_cluster(cluster)) == ("KarpenterNodeRole-my-cluster", "BobRole")


def test_a_database_deletion_is_exported_on_condition_of_the_version_last_seen(cluster, synced):
    seen = cluster.objects["EC2NodeClass", "default"]["metadata"]["resourceVersion"]
    delete_resource("EC2NodeClass", "default", source="ui", actor="alice")
    assert export_change("EC2NodeClass", "default", cluster).action == "exported"
    assert cluster.deletes == [("EC2NodeClass", "default", seen)]
    assert not cluster.objects
    echo = Event("DELETED", "EC2NodeClass", {"metadata": {"name": "default"}})
    assert import_event(echo).action == "unchanged"


def test_a_database_deletion_does_not_delete_an_object_changed_in_the_cluster(cluster, synced):
    cluster.kubectl_edit("EC2NodeClass", "default", set_role("BobRole"))
    delete_resource("EC2NodeClass", "default", source="ui", actor="alice")
    result = export_change("EC2NodeClass", "default", cluster)
    assert result.conflict
    assert result.cluster["spec"]["role"] == "BobRole"
    assert role_in_cluster(cluster) == "BobRole"


def test_a_watch_event_does_not_bring_back_a_deletion_awaiting_export(cluster, synced):
    delete_resource("EC2NodeClass", "default", source="ui", actor="alice")
    status_write = cluster.controller_writes_status("EC2NodeClass", "default", {"conditions": []})
    assert import_event(status_write).action == "pending"
    assert not EC2NodeClass.objects.exists()
    assert export_change("EC2NodeClass", "default", cluster).action == "exported"
    assert not cluster.objects
    # Created again later with kubectl, it is a new object, and welcome.
    recreated = cluster.kubectl_apply(status_write.object)
    assert import_event(recreated).action == "created"


# -- both ways


def test_reconcile_settles_both_sides(cluster, seed_ec2nodeclass, seed_nodepool):
    import_event(cluster.kubectl_apply({**seed_ec2nodeclass, "metadata": {"name": "gone"}}))
    cluster.kubectl_delete("EC2NodeClass", "gone")  # while nobody watched
    cluster.kubectl_apply(seed_ec2nodeclass)  # while nobody watched
    apply_manifest(seed_nodepool, source="ui", actor="alice")  # never exported
    results = {(r.kind, r.name): r.action for r in reconcile(cluster)}
    assert results == {
        ("EC2NodeClass", "default"): "created",
        ("EC2NodeClass", "gone"): "deleted",
        ("NodePool", "general"): "exported",
    }
    assert list(EC2NodeClass.objects.values_list("name", flat=True)) == ["default"]
    assert digest(cluster.objects["NodePool", "general"]) == digest(NodePool.objects.get().to_manifest())
    # A second pass finds nothing to do.
    assert {r.action for r in reconcile(cluster)} == {"unchanged"}
