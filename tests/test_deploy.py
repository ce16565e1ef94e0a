"""The deployable image and its manifests.

deploy/ renders with the venv's kubectl (``kubectl kustomize``) into objects that Kubernetes'
own schemas accept and that keep karpweb's invariants; the Dockerfile lints clean and builds
the image those manifests run; and the image's entrypoints start from the venv as they do in a
pod (CI has no Docker engine, so the same commands run without the container around them).
"""

from __future__ import annotations

import ast
import base64
import copy
import functools
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import dockerfile
import jsonschema
import kubernetes_validate
import pytest
import requests
import yaml
from django.core.management import call_command

from karpweb import entrypoint
from karpweb.celery import app as celery_app
from provisioning.cluster import kubernetes as cluster_kubernetes
from provisioning.crd.render import all_crds
from provisioning.launcher import embedded_redis_argv, free_port, wait_for_port
from provisioning.observability.broker import QUEUE_LENGTH

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
BIN = Path(sys.executable).parent
# The oldest Kubernetes the manifests are for (matchConditions is GA in 1.30) and the one
# karpweb targets by default (KARPWEB_KUBERNETES_VERSION).
KUBERNETES_VERSIONS = ("1.30.0", "1.33.0")
NAMESPACE = "karpweb"
UID = 10001
ROLES = {
    "karpweb-web": "web",
    "karpweb-webhook": "webhook",
    "karpweb-worker": "worker",
    "karpweb-beat": "beat",
    "karpweb-watch": "watch",
    "karpweb-interruptions": "interruptions",
}
# Kinds that are not built in, so no Kubernetes schema checks them; nothing else may appear.
CERT_MANAGER_KINDS = {"Issuer", "Certificate"}
# KEDA's, checked against tests/fixtures/keda/ instead.
KEDA_KINDS = {"ScaledObject", "TriggerAuthentication"}
KEDA_SCHEMAS = Path(__file__).resolve().parent / "fixtures" / "keda" / "v1alpha1.schema.yaml"


def kustomize(path: Path) -> list[dict]:
    done = subprocess.run([BIN / "kubectl", "kustomize", str(path)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"kubectl kustomize {path} failed:\n{done.stderr}"
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


@pytest.fixture(scope="module")
def no_cert_manager(tmp_path_factory) -> Path:
    """A copy of deploy/ with the files `manage.py webhook_certs` writes for the overlay."""
    copy_of_deploy = tmp_path_factory.mktemp("deploy") / "deploy"
    shutil.copytree(DEPLOY, copy_of_deploy)
    overlay = copy_of_deploy / "overlays" / "no-cert-manager"
    call_command("webhook_certs", out=str(overlay / "certs"), verbosity=0)
    return overlay


@pytest.fixture(scope="module")
def prometheus_adapter(tmp_path_factory) -> Path:
    """A profile of production with the prometheus-adapter component, as its comment says to write one."""
    overlay = tmp_path_factory.mktemp("prometheus-adapter")
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(DEPLOY / "overlays" / "production", overlay)],
        "components": [os.path.relpath(DEPLOY / "components" / "queue-scaling-prometheus-adapter", overlay)],
    }
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return overlay


@pytest.fixture(scope="module")
def renderings(no_cert_manager, prometheus_adapter) -> dict[str, list[dict]]:
    return {
        "base": kustomize(DEPLOY),
        "production": kustomize(DEPLOY / "overlays" / "production"),
        "no-cert-manager": kustomize(no_cert_manager),
        "production-keda": kustomize(DEPLOY / "overlays" / "production-keda"),
        "production-prometheus-adapter": kustomize(prometheus_adapter),
    }


@pytest.fixture(params=["base", "production", "no-cert-manager", "production-keda", "production-prometheus-adapter"])
def profile(request, renderings) -> str:
    return request.param


@pytest.fixture
def docs(profile, renderings) -> list[dict]:
    return renderings[profile]


def only(docs: list[dict], kind: str, name: str | None = None) -> dict:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def deployments(docs: list[dict]) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}


def main_container(deployment: dict) -> dict:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container


# --------------------------------------------------------------------------------------------------
# Rendering and schemas


def test_every_object_is_valid_for_kubernetes(docs):
    for doc in docs:
        what = f"{doc['kind']}/{doc['metadata']['name']}"
        if doc["kind"] in CERT_MANAGER_KINDS:
            assert doc["apiVersion"] == "cert-manager.io/v1", what
            continue
        if doc["kind"] in KEDA_KINDS:
            validate_keda(doc)
            continue
        for version in KUBERNETES_VERSIONS:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                path = ".".join(str(p) for p in exc.path)
                pytest.fail(f"{what} is invalid for Kubernetes {version} at {path}: {exc.message}")


@functools.cache
def keda_validators() -> dict[str, jsonschema.protocols.Validator]:
    schemas = yaml.safe_load(KEDA_SCHEMAS.read_text())
    defs = schemas.pop("$defs")
    return {kind: jsonschema.Draft202012Validator({**schema, "$defs": defs}) for kind, schema in schemas.items()}


def validate_keda(doc: dict) -> None:
    """A KEDA object against its schema; the HPA behavior a ScaledObject carries against Kubernetes'."""
    what = f"{doc['kind']}/{doc['metadata']['name']}"
    errors = sorted(keda_validators()[doc["kind"]].iter_errors(doc), key=lambda e: list(e.absolute_path))
    if errors:
        pytest.fail(f"{what}: " + "; ".join(f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in errors))
    behavior = doc["spec"].get("advanced", {}).get("horizontalPodAutoscalerConfig", {}).get("behavior")
    if behavior is not None:
        hpa = {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": doc["metadata"]["name"]},
            "spec": {**scaler_bounds(doc), "scaleTargetRef": doc["spec"]["scaleTargetRef"], "behavior": behavior},
        }
        for version in KUBERNETES_VERSIONS:
            kubernetes_validate.validate(hpa, version, strict=True)


def scaler_bounds(scaler: dict) -> dict[str, int]:
    """minReplicas and maxReplicas, of an HPA or of the HPA a ScaledObject makes."""
    spec = scaler["spec"]
    if scaler["kind"] == "ScaledObject":
        return {"minReplicas": spec["minReplicaCount"], "maxReplicas": spec["maxReplicaCount"]}
    return {"minReplicas": spec["minReplicas"], "maxReplicas": spec["maxReplicas"]}


def test_strict_validation_catches_a_misspelt_field(renderings):
    web = copy.deepcopy(only(renderings["base"], "Deployment", "karpweb-web"))
    main_container(web)["resource"] = main_container(web).pop("resources")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(web, KUBERNETES_VERSIONS[-1], strict=True)


def test_the_secret_template_is_valid_and_names_what_the_pods_need(docs):
    template = yaml.safe_load((DEPLOY / "secret.example.yaml").read_text())
    kubernetes_validate.validate(template, KUBERNETES_VERSIONS[-1], strict=True)
    assert template["metadata"] == {"name": "karpweb-env", "namespace": NAMESPACE}
    assert {"SECRET_KEY", "DATABASE_URL", "REDIS_URL", "AWS_REGION", "KARPWEB_CLUSTER_NAME"} <= set(
        template["stringData"]
    )
    # The template is applied apart from the kustomizations, so applying them never overwrites it.
    assert not [d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"] == "karpweb-env"]
    config = {d["metadata"]["name"] for d in docs if d["kind"] == "ConfigMap"}
    for deployment in deployments(docs).values():
        spec = deployment["spec"]["template"]["spec"]
        for container in spec["initContainers"] + spec["containers"]:
            refs = container["envFrom"]
            assert {"secretRef": {"name": "karpweb-env"}} in refs
            assert [r["configMapRef"]["name"] for r in refs if "configMapRef" in r][0] in config


# Kinds that have no namespace; every other object belongs in karpweb's.
CLUSTER_SCOPED = {
    "Namespace",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingWebhookConfiguration",
}


def test_every_object_is_karpwebs_and_in_its_namespace(docs):
    for doc in docs:
        what = f"{doc['kind']}/{doc['metadata']['name']}"
        assert doc["metadata"]["labels"]["app.kubernetes.io/part-of"] == "karpweb", what
        if doc["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in doc["metadata"], what
        else:
            assert doc["metadata"].get("namespace") == NAMESPACE, what


def test_the_crds_are_the_ones_in_deploy_crds(docs):
    rendered = {d["metadata"]["name"]: d for d in docs if d["kind"] == "CustomResourceDefinition"}
    kept = [yaml.safe_load((DEPLOY / "crds" / name).read_text()) for name in all_crds()]
    assert set(rendered) == {crd["metadata"]["name"] for crd in kept}
    for crd in kept:
        assert rendered[crd["metadata"]["name"]]["spec"] == crd["spec"]


# --------------------------------------------------------------------------------------------------
# Pods


def test_every_role_runs_as_a_deployment_of_the_one_image(docs):
    found = deployments(docs)
    assert set(found) == set(ROLES)
    images = set()
    for name, deployment in found.items():
        spec = deployment["spec"]["template"]["spec"]
        assert main_container(deployment)["args"][0] == ROLES[name]
        for container in spec["initContainers"] + spec["containers"]:
            entrypoint.parser().parse_args(container["args"])  # a role the entrypoint knows
            images.add(container["image"])
        assert deployment["metadata"]["namespace"] == NAMESPACE
    assert len(images) == 1


def test_every_container_is_restricted_and_sized(docs):
    namespace = only(docs, "Namespace")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    for name, deployment in deployments(docs).items():
        spec = deployment["spec"]["template"]["spec"]
        pod = spec["securityContext"]
        assert pod["runAsNonRoot"] is True and pod["runAsUser"] == UID, name
        assert pod["seccompProfile"] == {"type": "RuntimeDefault"}, name
        writable = {v["name"] for v in spec["volumes"] if "emptyDir" in v}
        for container in spec["initContainers"] + spec["containers"]:
            what = f"{name}/{container['name']}"
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False, what
            assert context["readOnlyRootFilesystem"] is True, what
            assert context["capabilities"] == {"drop": ["ALL"]}, what
            for bound in ("requests", "limits"):
                assert set(container["resources"][bound]) == {"cpu", "memory"}, what
            mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
            # The only places a read-only container writes: temporary files, and the var
            # directory (heartbeat, beat schedule) the image points KARPWEB_VAR_DIR at.
            assert mounts["/tmp"] in writable and mounts["/var/lib/karpweb"] in writable, what


def test_every_container_has_probes_that_fit_its_role(docs):
    for name, deployment in deployments(docs).items():
        container = main_container(deployment)
        probes = {kind: container[f"{kind}Probe"] for kind in ("startup", "liveness", "readiness")}
        role = ROLES[name]
        if role in ("web", "webhook"):
            port = {"web": 8000, "webhook": 8443}[role]
            scheme = {"web": "HTTP", "webhook": "HTTPS"}[role]
            named_ports = {p["name"]: p["containerPort"] for p in container["ports"]}
            for kind, probe in probes.items():
                get = probe["httpGet"]
                assert named_ports[get["port"]] == port and get.get("scheme", "HTTP") == scheme, (name, kind)
                # Django answers 400 to a Host it does not allow; the probes send one it does.
                assert get["httpHeaders"] == [{"name": "Host", "value": "localhost"}]
            assert probes["liveness"]["httpGet"]["path"] == "/healthz"
            assert probes["readiness"]["httpGet"]["path"] == "/readyz"
        else:
            for probe in probes.values():
                command = probe["exec"]["command"]
                assert command[:4] == ["python", "-m", "karpweb.entrypoint", "alive"], name
                assert entrypoint.parser().parse_args(command[3:]).role == "alive"


def test_migrations_run_once_in_the_beat_and_every_other_pod_waits_for_them(docs):
    for name, deployment in deployments(docs).items():
        (init,) = deployment["spec"]["template"]["spec"]["initContainers"]
        assert init["args"] == (["migrate"] if name == "karpweb-beat" else ["await-migrations"]), name


def test_beat_and_watch_are_single_and_never_overlap(docs):
    found = deployments(docs)
    for name in ("karpweb-beat", "karpweb-watch", "karpweb-interruptions"):
        assert found[name]["spec"]["replicas"] == 1
        assert found[name]["spec"]["strategy"] == {"type": "Recreate"}
        assert not [
            d for d in docs if d["kind"] == "HorizontalPodAutoscaler" and d["spec"]["scaleTargetRef"]["name"] == name
        ]


def test_disruption_budgets_cover_the_replicated_roles(docs):
    found = deployments(docs)
    budgets = [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    covered = set()
    for budget in budgets:
        assert budget["spec"]["maxUnavailable"] == 1
        selector = budget["spec"]["selector"]["matchLabels"]
        covered |= {
            n for n, d in found.items() if selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()
        }
    assert covered == {"karpweb-web", "karpweb-webhook", "karpweb-worker"}


# --------------------------------------------------------------------------------------------------
# The webhook


def test_the_webhook_fails_closed_quickly_through_its_service(docs):
    configuration = only(docs, "ValidatingWebhookConfiguration")
    assert [w["name"] for w in configuration["webhooks"]] == [
        "nodepools.validation.karpweb.io",
        "ec2nodeclasses.validation.karpweb.io",
        "nodeoverlays.validation.karpweb.io",
    ]
    # Every kind the validator serves is sent to it, each by exactly one webhook.
    from provisioning.crd import KINDS

    matched = [
        (group, version, resource)
        for webhook in configuration["webhooks"]
        for rule in webhook["rules"]
        for group in rule["apiGroups"]
        for version in rule["apiVersions"]
        for resource in rule["resources"]
    ]
    assert sorted(matched) == sorted((k.group, k.version, k.plural) for k in KINDS.values())
    for webhook in configuration["webhooks"]:
        assert webhook["failurePolicy"] == "Fail"
        assert webhook["timeoutSeconds"] == 5
        assert webhook["sideEffects"] == "None"
        assert webhook["clientConfig"]["service"] == {
            "namespace": NAMESPACE,
            "name": "karpweb-webhook",
            "path": "/webhook/validate",
            "port": 443,
        }
    service = only(docs, "Service", "karpweb-webhook")
    assert service["spec"]["ports"] == [{"name": "https", "protocol": "TCP", "port": 443, "targetPort": 8443}]
    deployment = only(docs, "Deployment", "karpweb-webhook")
    assert service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    env = {e["name"]: e.get("value") for e in main_container(deployment)["env"]}
    assert "karpweb-webhook.karpweb.svc" in env["ALLOWED_HOSTS"].split(",")  # the API server's Host
    assert deployment["spec"]["replicas"] >= 2


def webhook_tls_volume(docs: list[dict]) -> dict:
    deployment = only(docs, "Deployment", "karpweb-webhook")
    container = main_container(deployment)
    env = {e["name"]: e.get("value") for e in container["env"]}
    (mount,) = [m for m in container["volumeMounts"] if env["WEBHOOK_CERT_FILE"].startswith(m["mountPath"] + "/")]
    assert env["WEBHOOK_KEY_FILE"] == f"{mount['mountPath']}/tls.key"
    (volume,) = [v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"]]
    return volume["secret"]


def test_with_cert_manager_the_ca_is_injected_and_the_certificate_mounted(renderings):
    for profile in ("base", "production"):
        docs = renderings[profile]
        certificate = only(docs, "Certificate")
        configuration = only(docs, "ValidatingWebhookConfiguration")
        annotation = configuration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
        assert annotation == f"{certificate['metadata']['namespace']}/{certificate['metadata']['name']}"
        assert "karpweb-webhook.karpweb.svc" in certificate["spec"]["dnsNames"]
        assert only(docs, "Issuer")["metadata"]["name"] == certificate["spec"]["issuerRef"]["name"]
        assert webhook_tls_volume(docs)["secretName"] == certificate["spec"]["secretName"]
        assert all("caBundle" not in w["clientConfig"] for w in configuration["webhooks"])


def test_without_cert_manager_webhook_certs_fills_the_secret_and_the_ca_bundle(renderings, no_cert_manager):
    docs = renderings["no-cert-manager"]
    certs = no_cert_manager / "certs"
    assert not [d for d in docs if d["kind"] in CERT_MANAGER_KINDS]
    configuration = only(docs, "ValidatingWebhookConfiguration")
    assert "cert-manager.io/inject-ca-from" not in configuration["metadata"].get("annotations", {})
    for webhook in configuration["webhooks"]:
        assert base64.b64decode("".join(webhook["clientConfig"]["caBundle"].split())) == (certs / "ca.crt").read_bytes()
    # The serving pair is the Secret the webhook pods mount; only that one Secret is rendered.
    (secret,) = [d for d in docs if d["kind"] == "Secret"]
    assert secret["type"] == "kubernetes.io/tls"
    assert webhook_tls_volume(docs)["secretName"] == secret["metadata"]["name"]
    for key in ("tls.crt", "tls.key"):
        assert base64.b64decode("".join(secret["data"][key].split())) == (certs / key).read_bytes()


# --------------------------------------------------------------------------------------------------
# Ports, Services and NetworkPolicies: who reaches what

ANYWHERE = "anywhere"
PROMETHEUS = "namespace monitoring"
# Each role's container ports and who may open a connection to each: what
# deploy/base/networkpolicies.yaml says in its table, and README (Deploy) too.
REACHABLE = {
    "karpweb-web": {8000: ANYWHERE},  # the ingress; Prometheus (/metrics wants the token in production)
    "karpweb-webhook": {8443: ANYWHERE, 9100: PROMETHEUS},  # the API server is no pod; plain metrics
    "karpweb-worker": {9100: PROMETHEUS},  # plain metrics without a token
    "karpweb-beat": {},
    "karpweb-watch": {},
    "karpweb-interruptions": {},
}


def pod_labels(deployment: dict) -> dict[str, str]:
    return deployment["spec"]["template"]["metadata"]["labels"]


def selects(selector: dict, labels: dict[str, str]) -> bool:
    assert set(selector) <= {"matchLabels", "matchExpressions"}, selector
    for expression in selector.get("matchExpressions", []):
        key, operator, values = expression["key"], expression["operator"], expression.get("values", [])
        assert operator in ("In", "NotIn", "Exists", "DoesNotExist"), expression
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and key in labels and labels[key] in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
    return selector.get("matchLabels", {}).items() <= labels.items()


def reachable(docs: list[dict], deployment: dict) -> dict[int, str]:
    """{container port: who} that the NetworkPolicies let through to this Deployment's pods."""
    container = main_container(deployment)
    named = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
    found: dict[int, str] = {}
    isolated = False
    for policy in (d for d in docs if d["kind"] == "NetworkPolicy"):
        if not selects(policy["spec"]["podSelector"], pod_labels(deployment)):
            continue
        assert policy["spec"]["policyTypes"] == ["Ingress"], policy["metadata"]["name"]
        isolated = True
        for rule in policy["spec"].get("ingress", []):
            assert rule.get("ports"), f"{policy['metadata']['name']}: a rule for every port"
            if "from" not in rule:
                who = ANYWHERE
            else:
                (peer,) = rule["from"]
                assert set(peer) == {"namespaceSelector"}, peer
                (who,) = [f"namespace {v}" for v in peer["namespaceSelector"]["matchLabels"].values()]
            for port in rule["ports"]:
                assert port["protocol"] == "TCP"
                number = named[port["port"]] if isinstance(port["port"], str) else port["port"]
                assert number not in found, f"port {number} opened twice"
                found[number] = who
    assert isolated, f"{deployment['metadata']['name']}: no NetworkPolicy selects it"
    return found


def test_network_policies_let_in_exactly_what_each_role_serves(docs):
    found = deployments(docs)
    default_deny = only(docs, "NetworkPolicy", "karpweb-default-deny")["spec"]
    assert default_deny == {"podSelector": {}, "policyTypes": ["Ingress"]}
    for name, deployment in found.items():
        assert reachable(docs, deployment) == REACHABLE[name], name
        ports = {p["containerPort"] for p in main_container(deployment).get("ports", [])}
        assert ports == set(REACHABLE[name]), f"{name}: a port that no policy speaks of"


def test_services_expose_the_serving_ports_only(docs):
    """karpweb-web is what an ingress exposes: its pods' http port, nothing else; karpweb-webhook
    the webhook's 8443; the metrics ports of the webhook and worker pods are behind no Service."""
    services = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}
    assert set(services) == {"karpweb-web", "karpweb-webhook"}
    web = services["karpweb-web"]["spec"]
    assert web["type"] == "ClusterIP"
    assert web["ports"] == [{"name": "http", "port": 80, "targetPort": "http"}]
    assert web["selector"] == {"app.kubernetes.io/name": "karpweb-web"}
    webhook = services["karpweb-webhook"]["spec"]
    assert webhook["selector"] == {"app.kubernetes.io/name": "karpweb-webhook"}
    assert [p["targetPort"] for p in webhook["ports"]] == [8443]
    for name, service in services.items():
        for port in service["spec"]["ports"]:
            assert port["targetPort"] not in (9100, "metrics"), name


def test_serving_pods_are_scraped_where_the_policies_let_prometheus_in(docs):
    for name, deployment in deployments(docs).items():
        annotations = deployment["spec"]["template"]["metadata"].get("annotations", {})
        if name not in ("karpweb-web", "karpweb-webhook", "karpweb-worker"):
            assert "prometheus.io/scrape" not in annotations, name
            continue
        assert annotations["prometheus.io/scrape"] == "true" and annotations["prometheus.io/path"] == "/metrics"
        port = int(annotations["prometheus.io/port"])
        assert port in REACHABLE[name], name
        assert annotations.get("prometheus.io/scheme", "http") == "http", name
        if name == "karpweb-web":
            assert port == 8000  # its own /metrics, with the token
            continue
        # The webhook's gunicorn master and the worker's main process serve the metrics port
        # they are given, on the port that the policy opens to Prometheus' namespace only.
        container = main_container(deployment)
        env = {v["name"]: v.get("value") for v in container["env"]}
        assert env["KARPWEB_METRICS_PORT"] == str(port), name
        assert {"name": "metrics", "containerPort": port} in container["ports"], name
        assert REACHABLE[name][port] == PROMETHEUS, name


def test_web_pods_allow_their_own_address_for_the_scrape(docs):
    """/metrics passes the Host check; Prometheus sends the pod's IP, which POD_IP adds. The
    webhook's Django port serves Prometheus nothing, so its Host check keeps to the Service's name."""
    config = only(docs, "ConfigMap")["data"]
    assert config["KARPWEB_PRODUCTION"] == "true"
    env = main_container(deployments(docs)["karpweb-web"])["env"]
    assert {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}} in env
    webhook = main_container(deployments(docs)["karpweb-webhook"])["env"]
    assert "POD_IP" not in {v["name"] for v in webhook}


# --------------------------------------------------------------------------------------------------
# RBAC


def granted(docs: list[dict], kind: str = "ClusterRole") -> dict[tuple[str, str], frozenset[str]]:
    grants: dict[tuple[str, str], set[str]] = {}
    for rule in only(docs, kind)["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                grants.setdefault((group, resource), set()).update(rule["verbs"])
    return {key: frozenset(verbs) for key, verbs in grants.items()}


def test_the_cluster_role_grants_exactly_what_the_code_calls(docs):
    assert granted(docs) == cluster_kubernetes.API_ACCESS
    binding = only(docs, "ClusterRoleBinding")
    account = only(docs, "ServiceAccount")
    assert binding["roleRef"]["name"] == only(docs, "ClusterRole")["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": NAMESPACE}
    ]
    # The Lease is reachable in karpweb's own namespace only.
    assert granted(docs, "Role") == cluster_kubernetes.NAMESPACED_ACCESS
    role, role_binding = only(docs, "Role"), only(docs, "RoleBinding")
    assert role["metadata"]["namespace"] == role_binding["metadata"]["namespace"] == NAMESPACE
    assert role_binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "karpweb"}
    assert role_binding["subjects"] == binding["subjects"]
    # cluster_watch looks for its Lease in its own namespace, told by the downward API.
    watch = main_container(deployments(docs)["karpweb-watch"])
    assert {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}} in watch["env"]
    # Only the roles that call the API server carry its token.
    assert account["automountServiceAccountToken"] is False
    for name, deployment in deployments(docs).items():
        spec = deployment["spec"]["template"]["spec"]
        assert spec["serviceAccountName"] == account["metadata"]["name"]
        calls_the_api = ROLES[name] in ("worker", "watch", "interruptions")
        assert spec.get("automountServiceAccountToken", False) == calls_the_api, name


# Each call of the official client in provisioning/cluster/kubernetes.py, and the RBAC it needs:
# a (group, resource) with verbs, or only the verb for the custom-object calls, whose resource
# is an argument (NodeClaims, NodePools, EC2NodeClasses).
CLIENT_CALLS: dict[str, dict[tuple[str, str], set[str]] | str] = {
    "list_pod_for_all_namespaces": {("", "pods"): {"list", "watch"}},
    "create_namespaced_pod_eviction": {("", "pods/eviction"): {"create"}},
    "delete_namespaced_pod": {("", "pods"): {"delete"}},
    "list_node": {("", "nodes"): {"list", "watch"}},
    "read_node": {("", "nodes"): {"get"}},
    "patch_node": {("", "nodes"): {"patch"}},
    "delete_node": {("", "nodes"): {"delete"}},
    "list_daemon_set_for_all_namespaces": {("apps", "daemonsets"): {"list"}},
    "list_pod_disruption_budget_for_all_namespaces": {("policy", "poddisruptionbudgets"): {"list"}},
    "list_cluster_custom_object": "list",
    "get_cluster_custom_object": "get",
    "create_cluster_custom_object": "create",
    "replace_cluster_custom_object": "update",
    "delete_cluster_custom_object": "delete",
    "create_namespaced_event": {("", "events"): {"create"}},
    "read_namespaced_lease": {("coordination.k8s.io", "leases"): {"get"}},
    "create_namespaced_lease": {("coordination.k8s.io", "leases"): {"create"}},
    "replace_namespaced_lease": {("coordination.k8s.io", "leases"): {"update"}},
}


def test_every_client_call_is_in_api_access():
    """A new call through the official client fails here until API_ACCESS, and so the ClusterRole,
    grants what it needs."""
    tree = ast.parse(Path(cluster_kubernetes.__file__).read_text())
    calls = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Attribute)
        and isinstance(node.value.value, ast.Name)
        and node.value.value.id == "self"
        and node.value.attr in ("core", "apps", "policy", "custom", "coordination")
    }
    assert {"list_pod_for_all_namespaces", "create_cluster_custom_object"} <= calls  # the scan sees them
    unknown = calls - set(CLIENT_CALLS)
    assert not unknown, f"calls without RBAC accounted for: {sorted(unknown)}: add them to API_ACCESS"
    access = cluster_kubernetes.API_ACCESS | cluster_kubernetes.NAMESPACED_ACCESS
    custom = [verbs for (group, _), verbs in access.items() if group.startswith("karpenter")]
    for call in calls:
        needs = CLIENT_CALLS[call]
        if isinstance(needs, str):
            assert any(needs in verbs for verbs in custom), call
        else:
            for key, verbs in needs.items():
                assert verbs <= access.get(key, frozenset()), call


# --------------------------------------------------------------------------------------------------
# The production profile


def test_production_scales_spreads_and_assumes_the_aws_role(renderings):
    docs = renderings["production"]
    found = deployments(docs)
    account = only(docs, "ServiceAccount")
    assert account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"].startswith("arn:aws:iam::")
    assert found["karpweb-web"]["spec"]["replicas"] == 3
    assert found["karpweb-webhook"]["spec"]["replicas"] == 3
    # The HPA owns the worker count: the Deployment carries none that an apply would reset.
    assert "replicas" not in found["karpweb-worker"]["spec"]
    hpa = only(docs, "HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "karpweb-worker"}
    assert [m["resource"]["name"] for m in hpa["spec"]["metrics"]] == ["cpu"]
    image = main_container(found["karpweb-web"])["image"]
    assert "/" in image and not image.endswith(":latest")
    for name, deployment in found.items():
        spec = deployment["spec"]["template"]["spec"]
        terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert {"key": "karpenter.sh/nodepool", "operator": "DoesNotExist"} in terms[0]["matchExpressions"], name
        keys = {c["topologyKey"] for c in spec["topologySpreadConstraints"]}
        assert keys == {"topology.kubernetes.io/zone", "kubernetes.io/hostname"}, name
    config = only(docs, "ConfigMap")["data"]
    assert "localhost" in config["ALLOWED_HOSTS"].split(",")  # the probes' Host


# --------------------------------------------------------------------------------------------------
# The worker's scaler: the production HPA on CPU, or on the Celery queue as well through KEDA or
# prometheus-adapter


def worker_scalers(docs: list[dict]) -> list[dict]:
    return [
        d
        for d in docs
        if d["kind"] in ("HorizontalPodAutoscaler", "ScaledObject")
        and d["spec"]["scaleTargetRef"]["name"] == "karpweb-worker"
    ]


def identities(docs: list[dict]) -> dict[tuple[str, str], dict]:
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def test_one_scaler_owns_the_worker_count(profile, docs):
    """KEDA makes an HPA of its own from the ScaledObject: beside another HPA, two would set the
    Deployment's replicas in turn."""
    scalers = worker_scalers(docs)
    if profile == "base":
        assert scalers == []
        return
    (scaler,) = scalers
    assert scaler["kind"] == ("ScaledObject" if profile == "production-keda" else "HorizontalPodAutoscaler")
    assert scaler["metadata"]["namespace"] == NAMESPACE
    assert scaler["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "karpweb-worker"}
    assert "replicas" not in only(docs, "Deployment", "karpweb-worker")["spec"]
    assert scaler_bounds(scaler) == {"minReplicas": 3, "maxReplicas": 20}


def test_the_keda_profile_is_production_with_a_scaled_object_for_the_hpa(renderings):
    production = identities(renderings["production"])
    keda = identities(renderings["production-keda"])
    hpa = production.pop(("HorizontalPodAutoscaler", "karpweb-worker"))
    scaled = keda.pop(("ScaledObject", "karpweb-worker"))
    auth = keda.pop(("TriggerAuthentication", "karpweb-redis"))
    assert keda == production  # nothing else changes

    # The HPA KEDA makes scales as the production one, on CPU as well as on the queue.
    spec = scaled["spec"]
    assert spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"] == hpa["spec"]["behavior"]
    triggers = {t["type"]: t for t in spec["triggers"]}
    assert set(triggers) == {"redis", "cpu"}
    (cpu,) = [m["resource"] for m in hpa["spec"]["metrics"]]
    assert triggers["cpu"]["metricType"] == "Utilization"
    assert triggers["cpu"]["metadata"] == {"value": str(cpu["target"]["averageUtilization"])}

    # The queue karpweb sends its tasks to, in the Redis the Secret names.
    redis = triggers["redis"]
    assert redis["metadata"]["listName"] == celery_app.conf.task_default_queue == "celery"
    assert not celery_app.conf.task_routes and not celery_app.conf.task_queues  # so that one list holds them all
    assert int(redis["metadata"]["listLength"]) > 0
    assert redis["authenticationRef"] == {"name": auth["metadata"]["name"]}
    assert auth["metadata"]["namespace"] == scaled["metadata"]["namespace"] == NAMESPACE
    parameters = {ref["parameter"]: ref for ref in auth["spec"]["secretTargetRef"]}
    assert set(parameters) == {"address", "password", "tls"}
    assert {ref["name"] for ref in parameters.values()} == {"karpweb-env"}

    # The template of that Secret has the keys, naming the Redis of REDIS_URL.
    template = yaml.safe_load((DEPLOY / "secret.example.yaml").read_text())["stringData"]
    given = {parameter: template[ref["key"]] for parameter, ref in parameters.items()}
    url = urlsplit(template["REDIS_URL"])
    assert given["address"] == f"{url.hostname}:{url.port or 6379}"
    assert given["password"] == (url.password or "")
    assert given["tls"] == ("enable" if url.scheme == "rediss" else "disable")
    assert redis["metadata"]["databaseIndex"] == (url.path.strip("/") or "0")


def test_the_keda_schema_refuses_what_the_api_server_would_drop(renderings):
    keda = identities(renderings["production-keda"])
    scaled = keda[("ScaledObject", "karpweb-worker")]
    validate_keda(scaled)

    def refused(doc: dict) -> None:
        with pytest.raises(pytest.fail.Exception):
            validate_keda(doc)

    misspelt = copy.deepcopy(scaled)
    misspelt["spec"]["minReplicas"] = misspelt["spec"].pop("minReplicaCount")  # the HPA's name for it
    refused(misspelt)
    number = copy.deepcopy(scaled)
    number["spec"]["triggers"][0]["metadata"]["listLength"] = 8  # trigger metadata is strings only
    refused(number)
    behavior = copy.deepcopy(scaled)
    behavior["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]["window"] = 300
    with pytest.raises(kubernetes_validate.ValidationError):  # Kubernetes' own schema checks the behavior
        validate_keda(behavior)
    auth = copy.deepcopy(keda[("TriggerAuthentication", "karpweb-redis")])
    del auth["spec"]["secretTargetRef"][0]["key"]
    refused(auth)


def test_the_prometheus_adapter_profile_adds_the_queue_to_the_production_hpa(renderings):
    production = identities(renderings["production"])
    adapter = identities(renderings["production-prometheus-adapter"])
    before = production.pop(("HorizontalPodAutoscaler", "karpweb-worker"))
    hpa = adapter.pop(("HorizontalPodAutoscaler", "karpweb-worker"))
    assert adapter == production
    assert {k: v for k, v in hpa["spec"].items() if k != "metrics"} == {
        k: v for k, v in before["spec"].items() if k != "metrics"
    }
    cpu, queue = hpa["spec"]["metrics"]
    assert cpu == before["spec"]["metrics"][0]
    # The metric /metrics exports, for the queue the tasks go to, aiming where the KEDA component aims.
    assert queue["type"] == "External"
    assert queue["external"]["metric"] == {
        "name": QUEUE_LENGTH,
        "selector": {"matchLabels": {"queue": celery_app.conf.task_default_queue}},
    }
    scaled = only(renderings["production-keda"], "ScaledObject")
    (redis,) = [t for t in scaled["spec"]["triggers"] if t["type"] == "redis"]
    assert queue["external"]["target"] == {"type": "AverageValue", "averageValue": redis["metadata"]["listLength"]}


# --------------------------------------------------------------------------------------------------
# The Dockerfile


def instructions() -> list:
    return list(dockerfile.parse_file(str(ROOT / "Dockerfile")))


def test_the_dockerfile_lints_clean():
    done = subprocess.run([BIN / "hadolint", str(ROOT / "Dockerfile")], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_image_is_two_stages_non_root_with_the_entrypoint():
    commands = instructions()
    stages = [c for c in commands if c.cmd == "FROM"]
    assert len(stages) == 2 and [word.lower() for word in stages[0].value[1:]] == ["as", "builder"]
    # Both stages on the same Python, so the virtualenv copied across finds its interpreter.
    assert stages[0].value[0] == stages[1].value[0]
    base = {c.value[0].split("=", 1)[0]: c.value[0].split("=", 1)[1] for c in commands if c.cmd == "ARG"}
    assert base["PYTHON_IMAGE"].startswith("python:3.11-slim")

    builder = commands[: commands.index(stages[1])]
    final = commands[commands.index(stages[1]) :]
    copies = [c.value[0] for c in builder if c.cmd == "COPY"]
    assert copies == ["requirements.txt"]  # the dependencies' layer does not change with the code
    assert any(c.cmd == "COPY" and c.flags == ("--from=builder",) and c.value[0] == "/opt/venv" for c in final)

    env = {}
    for c in final:
        if c.cmd == "ENV":
            env.update(zip(c.value[::2], c.value[1::2], strict=True))
    assert env["PYTHONDONTWRITEBYTECODE"] == "1" and env["PYTHONUNBUFFERED"] == "1"
    # The manifests mount a writable volume on the var directory; the collected static files must
    # lie outside it or the volume would hide them.
    assert env["KARPWEB_VAR_DIR"] == "/var/lib/karpweb"
    assert not env["STATIC_ROOT"].startswith(env["KARPWEB_VAR_DIR"])
    (user,) = [c.value[0] for c in final if c.cmd == "USER"]
    assert user == f"{UID}:{UID}"  # the runAsUser of the manifests
    (entry,) = [c for c in final if c.cmd == "ENTRYPOINT"]
    assert entry.json and list(entry.value) == ["python", "-m", "karpweb.entrypoint"]
    (cmd,) = [c for c in final if c.cmd == "CMD"]
    assert entrypoint.parser().parse_args(list(cmd.value)).role == "web"
    (expose,) = [c for c in final if c.cmd == "EXPOSE"]
    assert set(expose.value) == {"8000", "8443"}


def test_the_build_context_holds_what_the_image_copies():
    """.dockerignore lets only the copied paths through; each of them exists."""
    allowed = [
        line[1:].rstrip("/") for line in (ROOT / ".dockerignore").read_text().splitlines() if line.startswith("!")
    ]
    sources = [c.value[0] for c in instructions() if c.cmd == "COPY" and not c.flags]
    for source in sources:
        assert (ROOT / source).exists(), source
        assert source.rstrip("/") in allowed, f"{source} is copied but .dockerignore leaves it out"


@pytest.mark.slow
def test_the_images_collectstatic_step_runs(tmp_path):
    """The build's RUN that collects static files, as written, run from the venv."""
    (run,) = [c.value[0] for c in instructions() if c.cmd == "RUN" and "collectstatic" in c.value[0]]
    (step,) = [part for part in run.split("&&") if "collectstatic" in part]
    words = shlex.split(step)
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    while "=" in words[0]:
        name, value = words.pop(0).split("=", 1)
        env[name] = value
    assert words[0] == "python"
    env.update(STATIC_ROOT=str(tmp_path / "static"), KARPWEB_VAR_DIR=str(tmp_path / "var"))
    done = subprocess.run([sys.executable, *words[1:]], cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "static" / "css" / "karpweb.css").is_file()
    assert not (tmp_path / "var" / "secret_key").exists()  # the build key is used, none is made


# --------------------------------------------------------------------------------------------------
# The entrypoints, started from the venv as the image starts them


class Role:
    """``python -m karpweb.entrypoint ROLE`` in its own process group, its output in a file."""

    def __init__(self, role: str, env: dict[str, str], workdir: Path) -> None:
        self.log = workdir / f"{role}.log"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "karpweb.entrypoint", role],
                cwd=ROOT,  # as the image's WORKDIR: `-m karpweb.entrypoint` imports from there
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, ready: Callable[[], bool], what: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ready():
                return
            if self.proc.poll() is not None:
                pytest.fail(f"exited with {self.proc.returncode} before {what}:\n{self.output()[-3000:]}")
            time.sleep(0.2)
        pytest.fail(f"timed out waiting for {what}:\n{self.output()[-3000:]}")

    def terminate(self, timeout: float = 30) -> int:
        """SIGTERM, as the kubelet sends it; the exit status."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running {timeout:g} s after SIGTERM:\n{self.output()[-3000:]}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@pytest.fixture
def start(tmp_path) -> Iterator[Callable[..., Role]]:
    started: list[Role] = []
    (tmp_path / "var").mkdir()  # as the image has it (and the pods mount a volume there)

    def start(role: str, **env: str) -> Role:
        # A database of the test's own (SQLite in tmp), never the one DATABASE_URL names.
        full = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
        full.update(KARPWEB_VAR_DIR=str(tmp_path / "var"), SECRET_KEY="test-only", LOG_LEVEL="INFO", **env)
        started.append(Role(role, full, tmp_path))
        return started[-1]

    yield start
    for role in started:
        role.kill()


@pytest.fixture(scope="module")
def own_redis(tmp_path_factory) -> Iterator[str]:
    """A Redis for the worker and the beat alone: the beat sends the periodic tasks and a starting
    worker queues a catalog refresh, which must not reach another test's worker."""
    port = free_port()
    proc = subprocess.Popen(embedded_redis_argv(port, tmp_path_factory.mktemp("redis")), stdout=subprocess.DEVNULL)
    try:
        wait_for_port(port, proc=proc)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def get_until_up(url: str, timeout: float = 60, **kwargs) -> requests.Response:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return requests.get(url, timeout=5, headers={"Host": "localhost"}, **kwargs)
        except requests.ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.mark.slow
def test_web_answers_its_probes_and_stops_on_sigterm(start, redis_url):
    port = free_port()
    web = start("web", BIND=f"127.0.0.1:{port}", WEB_CONCURRENCY="1", REDIS_URL=redis_url)
    assert get_until_up(f"http://127.0.0.1:{port}/healthz").json() == {"status": "ok"}
    ready = requests.get(f"http://127.0.0.1:{port}/readyz", headers={"Host": "localhost"}, timeout=5)
    assert ready.json()["checks"] == {"database": "ok", "redis": "ok"}
    assert ready.status_code == 200
    assert web.terminate() == 0


@pytest.mark.slow
def test_webhook_answers_over_tls_with_the_certs_of_webhook_certs(start, tmp_path, redis_url):
    certs = tmp_path / "certs"
    call_command("webhook_certs", out=str(certs), verbosity=0)
    port = free_port()
    webhook = start(
        "webhook",
        BIND=f"127.0.0.1:{port}",
        WEBHOOK_CONCURRENCY="1",
        WEBHOOK_CERT_FILE=str(certs / "tls.crt"),
        WEBHOOK_KEY_FILE=str(certs / "tls.key"),
        REDIS_URL=redis_url,
    )
    # Verified against the CA that becomes the caBundle, as the API server verifies it.
    url = f"https://127.0.0.1:{port}"
    assert get_until_up(f"{url}/healthz", verify=str(certs / "ca.crt")).json() == {"status": "ok"}
    ready = requests.get(f"{url}/readyz", headers={"Host": "localhost"}, verify=str(certs / "ca.crt"), timeout=5)
    assert ready.json()["checks"] == {"database": "ok", "redis": "ok"}
    assert ready.status_code == 200
    assert webhook.terminate() == 0


@pytest.mark.slow
@pytest.mark.parametrize(("role", "ready_line"), [("worker", " ready."), ("beat", "beat: Starting...")])
def test_worker_and_beat_start_keep_a_heartbeat_and_stop_on_sigterm(start, tmp_path, own_redis, role, ready_line):
    process = start(role, REDIS_URL=own_redis, WORKER_CONCURRENCY="1")
    process.wait_for(lambda: ready_line in process.output(), f"{ready_line!r} in the log")
    heartbeat = tmp_path / "var" / "heartbeat"
    process.wait_for(heartbeat.exists, "the first heartbeat")
    probe = [sys.executable, "-m", "karpweb.entrypoint", "alive", "--max-age", "60"]
    env = {k: v for k, v in os.environ.items() if k != "KARPWEB_HEARTBEAT_FILE"}
    env["KARPWEB_VAR_DIR"] = str(tmp_path / "var")
    assert subprocess.run(probe, env=env, check=False).returncode == 0
    # It keeps beating: the file is touched again within a few seconds.
    first = heartbeat.stat().st_mtime
    process.wait_for(lambda: heartbeat.stat().st_mtime > first, "a second heartbeat", timeout=30)
    assert process.terminate() == 0


@pytest.mark.slow
def test_await_migrations_waits_until_migrate_has_run(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(KARPWEB_VAR_DIR=str(tmp_path / "var"), SECRET_KEY="test-only")
    (tmp_path / "var").mkdir()

    def entry(*args: str) -> subprocess.CompletedProcess:
        argv = [sys.executable, "-m", "karpweb.entrypoint", *args]
        return subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, check=False)

    waiting = entry("await-migrations", "--timeout", "0")
    assert waiting.returncode == 1 and "migrations to be applied" in waiting.stderr
    migrated = entry("migrate")
    assert migrated.returncode == 0, migrated.stderr
    current = entry("await-migrations", "--timeout", "0")
    assert current.returncode == 0 and "schema is current" in current.stdout


# ------------------------------------------------------------------ deploy/aws: interruption queue and IAM

AWS_DEPLOY = DEPLOY / "aws"
INTERRUPTION_RULES = {
    "ScheduledChangeRule": ("aws.health", "AWS Health Event"),
    "SpotInterruptionRule": ("aws.ec2", "EC2 Spot Instance Interruption Warning"),
    "RebalanceRule": ("aws.ec2", "EC2 Instance Rebalance Recommendation"),
    "InstanceStateChangeRule": ("aws.ec2", "EC2 Instance State-change Notification"),
    "CapacityReservationInterruptionRule": ("aws.ec2", "EC2 Capacity Reservation Instance Interruption Warning"),
}


class CloudFormationLoader(yaml.SafeLoader):
    """YAML with CloudFormation's short-form intrinsics (``!Ref X`` → ``{"Ref": "X"}``)."""


def _intrinsic(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> dict:
    name = "Ref" if suffix == "Ref" else f"Fn::{suffix}"
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
        if suffix == "GetAtt":
            value = value.split(".", 1)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    return {name: value}


CloudFormationLoader.add_multi_constructor("!", _intrinsic)


@pytest.fixture(scope="module")
def interruption_template() -> dict:
    return yaml.load((AWS_DEPLOY / "interruption-queue.cloudformation.yaml").read_text(), Loader=CloudFormationLoader)


def test_the_interruption_template_makes_the_queue_of_upstreams_cloudformation(interruption_template):
    template = interruption_template
    assert template["AWSTemplateFormatVersion"] == "2010-09-09"
    assert set(template["Parameters"]) == {"ClusterName"}
    resources = template["Resources"]
    queue = resources["KarpenterInterruptionQueue"]
    assert queue["Type"] == "AWS::SQS::Queue"
    assert queue["Properties"] == {
        "QueueName": {"Ref": "ClusterName"},
        "MessageRetentionPeriod": 300,
        "SqsManagedSseEnabled": True,
    }
    policy = resources["KarpenterInterruptionQueuePolicy"]
    assert policy["Type"] == "AWS::SQS::QueuePolicy"
    assert policy["Properties"]["Queues"] == [{"Ref": "KarpenterInterruptionQueue"}]
    arn = {"Fn::GetAtt": ["KarpenterInterruptionQueue", "Arn"]}
    allow, deny = policy["Properties"]["PolicyDocument"]["Statement"]
    assert allow["Effect"] == "Allow"
    assert sorted(allow["Principal"]["Service"]) == ["events.amazonaws.com", "sqs.amazonaws.com"]
    assert (allow["Action"], allow["Resource"]) == ("sqs:SendMessage", arn)
    assert (deny["Effect"], deny["Principal"], deny["Resource"]) == ("Deny", "*", arn)
    assert deny["Condition"] == {"Bool": {"aws:SecureTransport": False}}
    assert template["Outputs"]["QueueName"]["Value"] == {"Fn::GetAtt": ["KarpenterInterruptionQueue", "QueueName"]}


def test_the_interruption_template_has_the_five_rules_targeting_the_queue(interruption_template):
    resources = interruption_template["Resources"]
    rules = {name: r for name, r in resources.items() if r["Type"] == "AWS::Events::Rule"}
    assert set(rules) == set(INTERRUPTION_RULES)
    for name, (source, detail_type) in INTERRUPTION_RULES.items():
        properties = rules[name]["Properties"]
        assert properties["EventPattern"] == {"source": [source], "detail-type": [detail_type]}
        assert properties["Targets"] == [
            {"Id": "KarpenterInterruptionQueueTarget", "Arn": {"Fn::GetAtt": ["KarpenterInterruptionQueue", "Arn"]}}
        ]
        assert properties.get("EventBusName", "default") == "default"


def test_the_simulated_aws_seeds_the_rules_of_the_template():
    from provisioning.cloud.simulated.seed import INTERRUPTION_RULES as SEEDED

    assert {logical: (source, detail) for logical, source, detail in SEEDED} == INTERRUPTION_RULES


def test_the_interruption_template_lints_clean():
    from cfnlint.api import lint_all

    found = lint_all((AWS_DEPLOY / "interruption-queue.cloudformation.yaml").read_text())
    # Errors and warnings; informational matches (I...) are suggestions, not faults.
    assert [str(m) for m in found if not m.rule.id.startswith("I")] == []


def test_the_iam_policy_grants_the_queue_and_instance_status_reads():
    from moto.iam.policy_validation import IAMPolicyDocumentValidator

    text = (AWS_DEPLOY / "iam-policy.json").read_text()
    assert "${ClusterName}" in text
    filled = text.replace("${ClusterName}", "my-cluster")
    IAMPolicyDocumentValidator(filled).validate()
    granted: dict[str, set[str]] = {}
    for statement in json.loads(filled)["Statement"]:
        assert statement["Effect"] == "Allow"
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        for action in actions:
            granted.setdefault(action, set()).add(statement["Resource"])
    queue = {"arn:aws:sqs:*:*:my-cluster"}
    assert granted == {
        "sqs:ReceiveMessage": queue,
        "sqs:DeleteMessage": queue,
        "sqs:GetQueueUrl": queue,
        "ec2:DescribeInstanceStatus": {"*"},
    }
