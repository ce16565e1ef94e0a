"""Manifests round-trip exactly through the models; every change is audited; writers
never overwrite each other."""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path

import pytest
import yaml
from django.core.management import CommandError, call_command

from provisioning import crd
from provisioning.crd.manifest import load_documents
from provisioning.models import AuditEntry, EC2NodeClass, NodeOverlay, NodePool
from provisioning.services.policy import Conflict, Invalid, apply_manifest, delete_resource

FIXTURES = Path(__file__).resolve().parent / "fixtures"

pytestmark = pytest.mark.django_db

SEED = FIXTURES / "seed"
SERVER_FIELDS = ("uid", "generation", "resourceVersion", "creationTimestamp")


def export(*args) -> str:
    out = io.StringIO()
    call_command("export", *args, stdout=out)
    return out.getvalue()


def import_(*args) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("import", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_the_seed_round_trips_exactly_through_import_and_export():
    out, err = import_("-f", str(SEED / "nodepool.yaml"), "-f", str(SEED / "ec2nodeclass.yaml"))
    assert out.splitlines() == [
        "ec2nodeclass.karpenter.k8s.aws/default created",
        "nodepool.karpenter.sh/general created",
    ]
    assert 'Warning: consolidationPolicy "WhenUnderutilized"' in err
    originals = {
        d["kind"]: d for f in ("nodepool.yaml", "ec2nodeclass.yaml") for d in load_documents((SEED / f).read_bytes())
    }
    exported = {d["kind"]: d for d in load_documents(export("--for-apply"))}
    for kind, original in originals.items():
        assert exported[kind] == crd.default(original), kind
    # The seed keeps its own words: the v1beta1 policy name is stored as written.
    assert exported["NodePool"]["spec"]["disruption"]["consolidationPolicy"] == "WhenUnderutilized"
    assert exported["NodePool"]["spec"]["limits"]["cpu"] == 1000  # an int stays an int


def test_export_looks_like_kubectl_get_and_reimports_unchanged():
    import_("-f", str(SEED / "ec2nodeclass.yaml"))
    text = export()
    doc = yaml.safe_load(text)
    assert list(doc) == sorted(doc)  # kubectl sorts keys
    assert set(SERVER_FIELDS) <= set(doc["metadata"])
    assert doc["spec"]["metadataOptions"] == {
        "httpEndpoint": "enabled",
        "httpProtocolIPv6": "disabled",
        "httpPutResponseHopLimit": 1,
        "httpTokens": "required",
    }
    import_("-f", _write(text))
    assert EC2NodeClass.objects.get().resource_version == 1  # applying the same object changes nothing
    assert export() == text


def test_json_manifests_and_json_export(tmp_path):
    seed = yaml.safe_load((SEED / "ec2nodeclass.yaml").read_text())
    path = tmp_path / "nc.json"
    path.write_text(json.dumps(seed))
    import_("-f", str(path))
    assert json.loads(export("-o", "json", "--for-apply")) == crd.default(seed)


def test_a_kubectl_list_is_unwrapped():
    docs = [yaml.safe_load((SEED / f).read_text()) for f in ("ec2nodeclass.yaml", "nodepool.yaml")]
    import_("-f", _write(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": docs})))
    assert NodePool.objects.count() == EC2NodeClass.objects.count() == 1


def test_import_is_all_or_nothing_and_names_the_file_document_and_field():
    bad = yaml.safe_load((SEED / "nodepool.yaml").read_text())
    bad["spec"]["weight"] = 0
    good = (SEED / "ec2nodeclass.yaml").read_text()
    path = _write(good + "---\n" + yaml.safe_dump(bad))
    with pytest.raises(CommandError) as excinfo:
        import_("-f", path)
    message = str(excinfo.value)
    assert "nothing was imported" in message
    assert f"{path} (document 2)" in message
    assert "NodePool/general is invalid" in message
    assert "spec.weight: Invalid value: 0: should be greater than or equal to 1" in message
    assert not EC2NodeClass.objects.exists()


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("key: [unclosed", "not valid YAML"),
        ("- just\n- a list\n", "expected a mapping"),
        ('{"kind": ', "not valid JSON"),
        (
            "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
            "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
            "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\n",
            "aliases",
        ),
        ("a: !!python/object:os.system x\n", "not valid YAML"),
        ("x: " + "[" * 200 + "]" * 200, "nested more than 64 levels"),
    ],
    ids=["not-yaml", "a-list", "bad-json", "billion-laughs", "python-tag", "deep"],
)
def test_unreadable_files_give_a_clear_error(text, fragment):
    with pytest.raises(CommandError, match=fragment):
        import_("-f", _write(text))


def test_a_5_mb_document_is_refused_before_parsing():
    with pytest.raises(CommandError, match="MiB limit"):
        import_("-f", _write("a: " + "x" * (5 * 1024 * 1024)))


def test_a_missing_file_is_a_clear_error():
    with pytest.raises(CommandError, match="No such file"):
        import_("-f", "/nonexistent/nodepool.yaml")


def test_every_change_is_audited_with_who_when_source_and_diff(seed_nodepool, seed_ec2nodeclass):
    apply_manifest(seed_ec2nodeclass, source="ui", actor="alice")
    changed = copy.deepcopy(seed_ec2nodeclass)
    changed["spec"]["role"] = "OtherRole"
    apply_manifest(changed, source="rest", actor="bob")
    apply_manifest(changed, source="rest", actor="bob")  # no change, no entry
    delete_resource("EC2NodeClass", "default", source="kubectl", actor="system:serviceaccount:x")
    entries = list(AuditEntry.objects.order_by("id"))
    assert [(e.action, e.source, e.actor) for e in entries] == [
        ("created", "ui", "alice"),
        ("updated", "rest", "bob"),
        ("deleted", "kubectl", "system:serviceaccount:x"),
    ]
    assert "-  role: KarpenterNodeRole-my-cluster\n+  role: OtherRole" in entries[1].diff
    assert entries[1].before["spec"]["role"] == "KarpenterNodeRole-my-cluster"
    assert entries[2].after is None and entries[2].at >= entries[0].at


def test_generation_counts_spec_changes_and_resource_version_counts_all(seed_ec2nodeclass):
    obj = apply_manifest(seed_ec2nodeclass, source="cli").obj
    assert (obj.generation, obj.resource_version) == (1, 1)
    seed_ec2nodeclass["metadata"]["labels"] = {"team": "platform"}
    obj = apply_manifest(seed_ec2nodeclass, source="cli").obj
    assert (obj.generation, obj.resource_version) == (1, 2)
    seed_ec2nodeclass["spec"]["role"] = "Other"
    obj = apply_manifest(seed_ec2nodeclass, source="cli").obj
    assert (obj.generation, obj.resource_version) == (2, 3)


def test_a_stale_resource_version_is_a_conflict_and_nothing_is_lost(seed_ec2nodeclass):
    obj = apply_manifest(seed_ec2nodeclass, source="ui", actor="alice").obj
    read_by_bob = obj.resource_version
    alice = copy.deepcopy(seed_ec2nodeclass)
    alice["spec"]["role"] = "AliceRole"
    apply_manifest(alice, source="ui", actor="alice", expected_version=obj.resource_version)
    bob = copy.deepcopy(seed_ec2nodeclass)
    bob["spec"]["role"] = "BobRole"
    with pytest.raises(Conflict) as excinfo:
        apply_manifest(bob, source="rest", actor="bob", expected_version=read_by_bob)
    assert excinfo.value.current.spec["role"] == "AliceRole"
    assert EC2NodeClass.objects.get().spec["role"] == "AliceRole"


def test_invalid_manifests_are_never_stored(seed_nodepool):
    seed_nodepool["spec"]["template"]["spec"]["requirements"][0]["operator"] = "Maybe"
    with pytest.raises(Invalid) as excinfo:
        apply_manifest(seed_nodepool, source="rest")
    assert excinfo.value.result.errors[0].path == "spec.template.spec.requirements[0].operator"
    assert not NodePool.objects.exists() and not AuditEntry.objects.exists()


def test_transition_rules_apply_on_update(seed_nodepool, seed_ec2nodeclass):
    apply_manifest(seed_nodepool, source="cli")
    seed_nodepool["spec"]["template"]["spec"]["nodeClassRef"]["kind"] = "OtherClass"
    with pytest.raises(Invalid, match="nodeClassRef.kind is immutable"):
        apply_manifest(seed_nodepool, source="cli")


def test_dry_run_validates_without_saving(seed_ec2nodeclass):
    applied = apply_manifest(seed_ec2nodeclass, source="rest", dry_run=True)
    assert applied.dry_run and applied.action == "created"
    assert applied.manifest["spec"]["metadataOptions"]["httpTokens"] == "required"
    assert not EC2NodeClass.objects.exists()


def test_indexed_columns_follow_the_spec(seed_nodepool):
    seed_nodepool["spec"]["weight"] = 42
    pool = apply_manifest(seed_nodepool, source="cli").obj
    assert (pool.node_class_name, pool.weight) == ("default", 42)
    assert pool.consolidation_policy == "WhenEmptyOrUnderutilized"
    assert NodePool.objects.filter(node_class_name="default", weight=42).exists()


def test_a_uid_from_the_cluster_is_kept_on_import(seed_ec2nodeclass):
    seed_ec2nodeclass["metadata"]["uid"] = "7d4c2b6e-9a51-4e0f-8f59-6b0f3f7a1c2d"
    obj = apply_manifest(seed_ec2nodeclass, source="kubectl").obj
    assert str(obj.uid) == "7d4c2b6e-9a51-4e0f-8f59-6b0f3f7a1c2d"


def test_model_clean_calls_the_validator():
    from django.core.exceptions import ValidationError

    pool = NodePool(name="x", spec={"template": {"spec": {"requirements": []}}})
    with pytest.raises(ValidationError, match="nodeClassRef: Required value"):
        pool.clean()


def test_migrate_creates_no_policies():
    assert not NodePool.objects.exists() and not EC2NodeClass.objects.exists()


def _write(text: str) -> str:
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as handle:
        handle.write(text)
    return handle.name


def test_a_create_never_replaces_an_object_of_the_same_name(seed_ec2nodeclass):
    apply_manifest(seed_ec2nodeclass, source="ui", actor="alice", create_only=True)
    other = copy.deepcopy(seed_ec2nodeclass)
    other["spec"]["role"] = "OtherRole"
    with pytest.raises(Conflict, match="'default' already exists") as excinfo:
        apply_manifest(other, source="ui", actor="bob", create_only=True)
    assert excinfo.value.current.spec["role"] == "KarpenterNodeRole-my-cluster"
    assert EC2NodeClass.objects.get().spec["role"] == "KarpenterNodeRole-my-cluster"
    assert AuditEntry.objects.count() == 1


@pytest.mark.parametrize(
    "path, line",
    [
        ("spec.template.spec.requirements[3].operator", 19),
        ("spec.limits[memory]", 27),
        ("spec.template.spec.requirements[3]", 18),
        ("spec.disruption.budgets[0]", 28),  # not written: its nearest written parent
        ("spec.weight", 5),
        ("metadata.labels['a b']", 3),
        ("", 1),
    ],
)
def test_a_field_path_is_found_on_its_line(path, line):
    from provisioning.crd.manifest import line_of

    assert line_of((SEED / "nodepool.yaml").read_text(), path) == line


def test_a_field_path_in_text_that_is_not_yaml_has_no_line():
    from provisioning.crd.manifest import line_of

    assert line_of("a: [", "a") is None
    assert line_of("", "a") is None


SAVINGS_PLAN = """\
apiVersion: karpenter.sh/v1alpha1
kind: NodeOverlay
metadata:
  name: savings-plan
spec:
  weight: 10
  requirements:
    - key: karpenter.k8s.aws/instance-family
      operator: In
      values: ["m7i"]
  priceAdjustment: "-27%"
"""


def test_a_nodeoverlay_round_trips_through_import_and_export_and_is_audited(tmp_path):
    path = tmp_path / "overlay.yaml"
    path.write_text(SAVINGS_PLAN)
    out, _ = import_("-f", str(path))
    assert out.splitlines() == ["nodeoverlay.karpenter.sh/savings-plan created"]
    (exported,) = load_documents(export("--for-apply", "--kind", "NodeOverlay"))
    assert exported == load_documents(SAVINGS_PLAN.encode())[0]
    assert [d["kind"] for d in load_documents(export())] == ["NodeOverlay"]
    entry = AuditEntry.objects.get(kind="NodeOverlay")
    assert (entry.name, entry.action, entry.source) == ("savings-plan", "created", "cli")


def test_an_invalid_nodeoverlay_is_not_imported_and_the_error_names_document_and_field(tmp_path):
    path = tmp_path / "overlay.yaml"
    path.write_text(SAVINGS_PLAN.replace('"-27%"', '"27%"'))
    with pytest.raises(CommandError) as error:
        import_("-f", str(path))
    assert "NodeOverlay/savings-plan is invalid" in str(error.value)
    assert 'spec.priceAdjustment: Invalid value: "27%"' in str(error.value)
    assert not NodeOverlay.objects.exists()
