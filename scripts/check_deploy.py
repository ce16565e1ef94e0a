#!/usr/bin/env python3
"""``manage.py check --deploy`` with the settings the production overlay gives each serving pod.

    .venv/bin/python scripts/check_deploy.py                      # deploy/overlays/production
    .venv/bin/python scripts/check_deploy.py --overlay deploy/overlays/production-keda

Renders the overlay (the venv's ``kubectl kustomize``), and for the web and the webhook
Deployment builds the environment their container gets: the ConfigMap, the Secret of
deploy/secret.example.yaml with its two secrets filled in as an operator fills them (a fresh
SECRET_KEY and KARPWEB_METRICS_TOKEN; the other placeholders are never read by the check), and
the container's own env (the downward API's fields given sample values). Then runs
``manage.py check --deploy --fail-level WARNING`` in that environment: any warning fails.
Exit status 0 when every role is clean. CI runs it (``make check-deploy``; tests/test_deploy.py).
"""

from __future__ import annotations

import argparse
import os
import secrets
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
SECRET_TEMPLATE = ROOT / "deploy" / "secret.example.yaml"
SERVING = ("karpweb-web", "karpweb-webhook")
# What the downward API would give a pod.
FIELDS = {"status.podIP": "10.0.3.7", "metadata.namespace": "karpweb", "metadata.name": "karpweb-web-0"}


def render(overlay: Path) -> list[dict]:
    done = subprocess.run([BIN / "kubectl", "kustomize", str(overlay)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"kubectl kustomize {overlay} failed:\n{done.stderr}")
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def filled_secret() -> dict[str, str]:
    """The Secret's settings as an operator fills them in: the secrets karpweb checks at start
    are made here, the rest (addresses, the database's password) stay as the template has them."""
    data = dict(yaml.safe_load(SECRET_TEMPLATE.read_text())["stringData"])
    data["SECRET_KEY"] = secrets.token_urlsafe(50)
    data["KARPWEB_METRICS_TOKEN"] = secrets.token_urlsafe(32)
    return data


def pod_env(docs: list[dict], deployment: str, secret: dict[str, str]) -> dict[str, str]:
    """The environment of ``deployment``'s main container: envFrom in order, then env."""
    (found,) = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == deployment]
    (container,) = found["spec"]["template"]["spec"]["containers"]
    configmaps = {d["metadata"]["name"]: d.get("data", {}) for d in docs if d["kind"] == "ConfigMap"}
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            env.update(configmaps[source["configMapRef"]["name"]])
        elif source["secretRef"]["name"] == "karpweb-env":
            env.update(secret)
        else:
            raise SystemExit(f"{deployment}: envFrom {source} is neither the ConfigMap nor karpweb-env")
    for variable in container.get("env", []):
        if "value" in variable:
            env[variable["name"]] = variable["value"]
        else:
            env[variable["name"]] = FIELDS[variable["valueFrom"]["fieldRef"]["fieldPath"]]
    # The entrypoint sets the role (karpweb/entrypoint.py) from the container's argument.
    env["KARPWEB_ROLE"] = container["args"][0]
    return env


def check(env: dict[str, str], workdir: Path) -> subprocess.CompletedProcess[str]:
    """check --deploy with exactly ``env`` (and what Python needs to run), nothing of ours."""
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "SYSTEMROOT")}
    full = {**keep, **env, "KARPWEB_VAR_DIR": str(workdir), "DJANGO_SETTINGS_MODULE": "karpweb.settings"}
    argv = [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"]
    return subprocess.run(argv, cwd=ROOT, env=full, capture_output=True, text=True, check=False)


def main(argv: list[str] | None = None) -> int:
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--overlay", type=Path, default=ROOT / "deploy" / "overlays" / "production")
    options = parser.parse_args(argv)
    docs = render(options.overlay)
    secret = filled_secret()
    failed = 0
    with tempfile.TemporaryDirectory(prefix="karpweb-check-deploy-") as workdir:
        for deployment in SERVING:
            done = check(pod_env(docs, deployment, secret), Path(workdir))
            output = (done.stdout + done.stderr).strip()
            print(f"{deployment}: {'clean' if done.returncode == 0 else 'FAILED'}\n  " + output.replace("\n", "\n  "))
            failed += done.returncode != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
