"""Node bootstrap: the user data that makes an instance join the cluster, per AMI family
(reference Part II §1.2, §5.3).

* AL2023: a nodeadm ``NodeConfig`` after the user's parts, in a MIME multipart archive.
* AL2: the user's parts, then ``/etc/eks/bootstrap.sh`` with the kubelet flags.
* Bottlerocket: TOML settings; the user's TOML is kept, ours wins where both set a key.
* Windows: the EKS bootstrap PowerShell script after the user's commands.
* Custom: the user's ``userData`` as it is.
"""

from __future__ import annotations

import email
import json
import re
import shlex
import tomllib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import yaml

from provisioning.cloud.base import CloudError, LaunchRequest
from provisioning.cloud.config import AWSConfig
from provisioning.cloud.tags import NODECLASS_TAG, NODEPOOL_TAG
from provisioning.crd.ec2nodeclass import effective_ami_family
from provisioning.crd.labels import CAPACITY_TYPE, INSTANCE_TYPE

DO_NOT_SYNC_TAINTS_LABEL = "karpenter.sh/do-not-sync-taints"
UNREGISTERED_TAINT = {"key": "karpenter.sh/unregistered", "effect": "NoExecute"}


def _kubelet_may_set(key: str) -> bool:
    """Labels the kubelet may register itself with and that hold for every offering of a
    template (zone, type and arch are set by the kubelet and the cloud)."""
    prefix = key.split("/", 1)[0] if "/" in key else ""
    for domain in ("kubernetes.io", "k8s.io"):
        if prefix == domain or prefix.endswith("." + domain):
            return prefix in ("kubelet.kubernetes.io", "node.kubernetes.io") and key != INSTANCE_TYPE
    return True


def _taint_flag(taint: dict[str, Any]) -> str:
    value = taint.get("value")
    return f"{taint['key']}={value}:{taint['effect']}" if value else f"{taint['key']}:{taint['effect']}"


@dataclass(frozen=True)
class NodeBootstrap:
    """What a node needs to join the cluster; rendered per AMI family."""

    family: str
    cluster_name: str
    cluster_endpoint: str
    cluster_ca_bundle: str
    cluster_cidr: str
    labels: tuple[tuple[str, str], ...]
    taints: tuple[dict[str, Any], ...]
    kubelet: dict[str, Any]
    custom_user_data: str

    @property
    def max_pods(self) -> int | None:
        value = self.kubelet.get("maxPods")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def cluster_dns(self) -> list[str]:
        dns = self.kubelet.get("clusterDNS") or []
        return [str(d) for d in dns] if isinstance(dns, list) else [str(dns)]

    def label_flag(self) -> str:
        """``--node-labels="k=v,..."`` (quoted as upstream writes it; the kubelet's
        environment file and the shell both strip the quotes)."""
        return '--node-labels="' + ",".join(f"{k}={v}" for k, v in self.labels) + '"'

    def taint_flag(self) -> str:
        return "--register-with-taints=" + ",".join(_taint_flag(t) for t in self.taints)

    def render(self) -> str:
        if self.family == "Custom":
            return self.custom_user_data
        if self.family == "Bottlerocket":
            return self._bottlerocket()
        if self.family.startswith("Windows"):
            return self._windows()
        if self.family == "AL2":
            return self._al2()
        return self._al2023()

    # AL2023: a nodeadm NodeConfig after the user's parts, in a MIME multipart archive.
    def _al2023(self) -> str:
        cluster: dict[str, Any] = {"name": self.cluster_name, "apiServerEndpoint": self.cluster_endpoint}
        if self.cluster_ca_bundle:
            cluster["certificateAuthority"] = self.cluster_ca_bundle
        if self.cluster_cidr:
            cluster["cidr"] = self.cluster_cidr
        config = {
            k: v
            for k, v in self.kubelet.items()
            if k != "registerWithTaints" and not (k == "maxPods" and self.max_pods is None)
        }
        if self.cluster_dns:
            config["clusterDNS"] = self.cluster_dns
        kubelet: dict[str, Any] = {}
        if config:
            kubelet["config"] = dict(sorted(config.items()))
        kubelet["flags"] = [self.label_flag(), self.taint_flag()]
        document = {
            "apiVersion": "node.eks.aws/v1alpha1",
            "kind": "NodeConfig",
            "spec": {"cluster": cluster, "kubelet": kubelet},
        }
        node_config = "# karpweb NodeConfig\n" + yaml.safe_dump(document, sort_keys=False, default_flow_style=False)
        parts = self._user_parts(detect_node_config=True)
        return mime_archive([*parts, ("application/node.eks.aws", node_config)])

    # AL2: the user's parts, then /etc/eks/bootstrap.sh with the kubelet flags.
    def _al2(self) -> str:
        extra = [self.label_flag(), self.taint_flag()]
        if self.max_pods is not None:
            extra.append(f"--max-pods={self.max_pods}")
        extra += _kubelet_flags(self.kubelet)
        lines = [
            "#!/bin/bash -xe",
            "exec > >(tee /var/log/user-data.log|logger -t user-data -s 2>/dev/console) 2>&1",
            f"/etc/eks/bootstrap.sh {shlex.quote(self.cluster_name)} --apiserver-endpoint "
            f"{shlex.quote(self.cluster_endpoint)} --b64-cluster-ca {shlex.quote(self.cluster_ca_bundle)} \\",
        ]
        if self.max_pods is not None:
            lines.append("--use-max-pods false \\")
        dns = self.cluster_dns
        lines.append(f"--kubelet-extra-args {shlex.quote(' '.join(extra))}" + (" \\" if dns else ""))
        if dns:
            lines.append(f"--dns-cluster-ip {shlex.quote(dns[0])}")
        script = "\n".join(lines) + "\n"
        parts = self._user_parts(detect_node_config=False)
        return mime_archive([*parts, ('text/x-shellscript; charset="us-ascii"', script)])

    # Bottlerocket: TOML settings; the user's TOML is kept, ours wins where both set a key.
    def _bottlerocket(self) -> str:
        try:
            user = tomllib.loads(self.custom_user_data) if self.custom_user_data.strip() else {}
        except tomllib.TOMLDecodeError as exc:
            raise CloudError(f"userData is not valid TOML for Bottlerocket: {exc}", reason="InvalidUserData") from exc
        kubernetes: dict[str, Any] = {
            "api-server": self.cluster_endpoint,
            "cluster-name": self.cluster_name,
        }
        if self.cluster_ca_bundle:
            kubernetes["cluster-certificate"] = self.cluster_ca_bundle
        if self.cluster_dns:
            kubernetes["cluster-dns-ip"] = self.cluster_dns if len(self.cluster_dns) > 1 else self.cluster_dns[0]
        if self.max_pods is not None:
            kubernetes["max-pods"] = self.max_pods
        for source, target in (
            ("kubeReserved", "kube-reserved"),
            ("systemReserved", "system-reserved"),
            ("evictionHard", "eviction-hard"),
            ("evictionSoft", "eviction-soft"),
            ("evictionSoftGracePeriod", "eviction-soft-grace-period"),
        ):
            if isinstance(self.kubelet.get(source), dict):
                kubernetes[target] = {str(k): str(v) for k, v in self.kubelet[source].items()}
        for source, target in (
            ("imageGCHighThresholdPercent", "image-gc-high-threshold-percent"),
            ("imageGCLowThresholdPercent", "image-gc-low-threshold-percent"),
            ("cpuCFSQuota", "cpu-cfs-quota-enforced"),
            ("evictionMaxPodGracePeriod", "eviction-max-pod-grace-period"),
        ):
            if source in self.kubelet:
                kubernetes[target] = self.kubelet[source]
        kubernetes["node-labels"] = dict(self.labels)
        taints: dict[str, list[str]] = {}
        for taint in self.taints:
            taints.setdefault(taint["key"], []).append(f"{taint.get('value') or ''}:{taint['effect']}")
        kubernetes["node-taints"] = taints
        merged = _deep_merge(user, {"settings": {"kubernetes": kubernetes}})
        return toml_dumps(merged)

    # Windows: the EKS bootstrap PowerShell script after the user's commands.
    def _windows(self) -> str:
        extra = [self.label_flag(), self.taint_flag()]
        if self.max_pods is not None:
            extra.append(f"--max-pods={self.max_pods}")
        args = [
            f"-EKSClusterName '{self.cluster_name}'",
            f"-APIServerEndpoint '{self.cluster_endpoint}'",
            f"-Base64ClusterCA '{self.cluster_ca_bundle}'",
            f"-KubeletExtraArgs '{' '.join(extra)}'",
        ]
        if self.cluster_dns:
            args.append(f"-DNSClusterIP '{self.cluster_dns[0]}'")
        user = self.custom_user_data.strip()
        user = user.removeprefix("<powershell>").removesuffix("</powershell>").strip()
        body = [
            "<powershell>",
            *([user] if user else []),
            '[string]$EKSBootstrapScriptFile = "$env:ProgramFiles\\Amazon\\EKS\\Start-EKSBootstrap.ps1"',
            "& $EKSBootstrapScriptFile " + " ".join(args),
            "</powershell>",
        ]
        return "\n".join(body) + "\n"

    def _user_parts(self, detect_node_config: bool) -> list[tuple[str, str]]:
        """The user's userData as MIME parts (upstream's merge: a MIME archive is split into
        its parts; anything else becomes one part, a NodeConfig when it is a YAML mapping)."""
        text = self.custom_user_data
        if not text.strip():
            return []
        stripped = text.strip()
        if stripped.startswith("MIME-Version:") or stripped.startswith("Content-Type:"):
            message = email.message_from_string(stripped)
            if not message.is_multipart():
                raise CloudError("userData looks like MIME but is not a multipart archive", reason="InvalidUserData")
            parts = []
            for part in message.walk():
                if part.is_multipart():
                    continue
                payload = part.get_payload(decode=True)
                content = payload.decode("utf-8", "replace") if isinstance(payload, bytes) else str(part.get_payload())
                parts.append((part.get("Content-Type", "text/x-shellscript"), content))
            return parts
        content_type = 'text/x-shellscript; charset="us-ascii"'
        if detect_node_config:
            try:
                if isinstance(yaml.safe_load(text), dict):
                    content_type = "application/node.eks.aws"
            except yaml.YAMLError:
                pass
        return [(content_type, text)]


def node_bootstrap(request: LaunchRequest, config: AWSConfig) -> NodeBootstrap:
    """What a node of this launch request needs to join the cluster of ``config``: the
    NodePool's labels the kubelet may set, Karpenter's own labels, the taints with
    ``karpenter.sh/unregistered``, the EC2NodeClass's kubelet settings and user data."""
    spec = request.nodeclass_spec
    family = request.nodeclass.ami_family or effective_ami_family(spec) or "AL2023"
    labels = {k: str(v) for k, v in request.labels.items() if _kubelet_may_set(k)}
    labels[NODEPOOL_TAG] = request.nodepool
    labels[NODECLASS_TAG] = request.nodeclass.name
    labels[CAPACITY_TYPE] = request.capacity_type
    if family != "Custom":
        labels[DO_NOT_SYNC_TAINTS_LABEL] = "true"
    taints: list[dict[str, Any]] = []
    for taint in [*request.taints, UNREGISTERED_TAINT]:
        entry = {"key": taint["key"], "effect": taint["effect"]}
        if taint.get("value"):
            entry["value"] = str(taint["value"])
        if entry not in taints:
            taints.append(entry)
    kubelet = spec.get("kubelet") if isinstance(spec.get("kubelet"), dict) else {}
    return NodeBootstrap(
        family=family,
        cluster_name=config.cluster_name,
        cluster_endpoint=config.cluster_endpoint,
        cluster_ca_bundle=config.cluster_ca_bundle,
        cluster_cidr=config.cluster_cidr,
        labels=tuple(sorted(labels.items())),
        taints=tuple(taints),
        kubelet=dict(kubelet),
        custom_user_data=str(spec.get("userData") or ""),
    )


def _kubelet_flags(kubelet: dict[str, Any]) -> list[str]:
    """KubeletConfiguration fields the AL2 bootstrap passes as kubelet flags."""
    flags = []
    for source, flag in (
        ("kubeReserved", "--kube-reserved"),
        ("systemReserved", "--system-reserved"),
    ):
        if isinstance(kubelet.get(source), dict):
            flags.append(f"{flag}=" + ",".join(f"{k}={v}" for k, v in sorted(kubelet[source].items())))
    for source, flag in (("evictionHard", "--eviction-hard"), ("evictionSoft", "--eviction-soft")):
        if isinstance(kubelet.get(source), dict):
            flags.append(f"{flag}=" + ",".join(f"{k}<{v}" for k, v in sorted(kubelet[source].items())))
    if isinstance(kubelet.get("evictionSoftGracePeriod"), dict):
        pairs = sorted(kubelet["evictionSoftGracePeriod"].items())
        flags.append("--eviction-soft-grace-period=" + ",".join(f"{k}={v}" for k, v in pairs))
    for source, flag in (
        ("podsPerCore", "--pods-per-core"),
        ("imageGCHighThresholdPercent", "--image-gc-high-threshold"),
        ("imageGCLowThresholdPercent", "--image-gc-low-threshold"),
        ("evictionMaxPodGracePeriod", "--eviction-max-pod-grace-period"),
    ):
        if source in kubelet:
            flags.append(f"{flag}={kubelet[source]}")
    if "cpuCFSQuota" in kubelet:
        flags.append(f"--cpu-cfs-quota={str(bool(kubelet['cpuCFSQuota'])).lower()}")
    return flags


MIME_BOUNDARY = "//"


def mime_archive(parts: list[tuple[str, str]]) -> str:
    """A MIME multipart/mixed archive as cloud-init and nodeadm read it."""
    out = ["MIME-Version: 1.0", f'Content-Type: multipart/mixed; boundary="{MIME_BOUNDARY}"', ""]
    for content_type, content in parts:
        out += [f"--{MIME_BOUNDARY}", f"Content-Type: {content_type}", "", content.rstrip("\n")]
    out.append(f"--{MIME_BOUNDARY}--")
    return "\n".join(out) + "\n"


def _deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _toml_key(key: str) -> str:
    return key if _BARE_KEY.match(key) else _toml_string(key)


def _toml_string(value: str) -> str:
    if "'" not in value and "\n" not in value:
        return f"'{value}'"
    return json.dumps(value)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_toml_key(str(k))} = {_toml_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, datetime):
        return value.isoformat()
    return _toml_string(str(value))


def toml_dumps(document: dict[str, Any]) -> str:
    """Nested tables of scalars and lists as TOML (what Bottlerocket settings need)."""
    lines: list[str] = []

    def table(path: list[str], values: dict[str, Any]) -> None:
        scalars = {k: v for k, v in values.items() if not isinstance(v, dict)}
        tables = {k: v for k, v in values.items() if isinstance(v, dict)}
        if path and (scalars or not tables):
            if lines:
                lines.append("")
            lines.append("[" + ".".join(_toml_key(p) for p in path) + "]")
        for key, value in scalars.items():
            lines.append(f"{_toml_key(str(key))} = {_toml_value(value)}")
        for key, value in tables.items():
            table([*path, str(key)], value)

    table([], document)
    return "\n".join(lines) + "\n"
