"""TLS for the admission webhook: `manage.py webhook_certs`, and gunicorn serving the webhook over HTTPS."""

from __future__ import annotations

import base64
import io
import os
import secrets
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import requests
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from django.core.management import call_command
from django.core.management.base import CommandError

from provisioning.launcher import free_port
from provisioning.management.commands.webhook_certs import make_ca

ROOT = Path(__file__).resolve().parent.parent
WSGI_APP = "karpweb.wsgi:application"
FILES = ("ca.crt", "ca.key", "tls.crt", "tls.key")
SERVICE_DNS = {
    "karpweb-webhook",
    "karpweb-webhook.karpweb",
    "karpweb-webhook.karpweb.svc",
    "karpweb-webhook.karpweb.svc.cluster.local",
    "localhost",
}


def make_certs(out: Path, *args: str, **options) -> list[str]:
    """Run the command; return its stdout lines."""
    stdout = io.StringIO()
    options.setdefault("service", "karpweb-webhook")
    options.setdefault("namespace", "karpweb")
    call_command("webhook_certs", *args, out=str(out), stdout=stdout, **options)
    return stdout.getvalue().splitlines()


def load(out: Path):
    ca = x509.load_pem_x509_certificate((out / "ca.crt").read_bytes())
    leaf = x509.load_pem_x509_certificate((out / "tls.crt").read_bytes())
    return ca, leaf


def snapshot(out: Path) -> dict[str, bytes]:
    return {name: (out / name).read_bytes() for name in FILES}


# --------------------------------------------------------------------------------------------------
# manage.py webhook_certs


def test_writes_a_ca_and_a_serving_cert_for_the_service(tmp_path):
    lines = make_certs(tmp_path)

    ca, leaf = load(tmp_path)
    # Signed by the CA (raises InvalidSignature otherwise), and the CA is a CA.
    leaf.verify_directly_issued_by(ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    assert leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    assert leaf.issuer == ca.subject

    sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "karpweb-webhook.karpweb.svc" in sans.get_values_for_type(x509.DNSName)
    assert set(sans.get_values_for_type(x509.DNSName)) == SERVICE_DNS
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    usage = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert x509.oid.ExtendedKeyUsageOID.SERVER_AUTH in usage

    # The keys belong to the certificates, are EC P-256, and only the owner can read them.
    for cert_name, key_name in (("ca.crt", "ca.key"), ("tls.crt", "tls.key")):
        key = serialization.load_pem_private_key((tmp_path / key_name).read_bytes(), password=None)
        assert isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name == "secp256r1"
        cert = x509.load_pem_x509_certificate((tmp_path / cert_name).read_bytes())
        assert cert.public_key().public_numbers() == key.public_key().public_numbers()
        assert (tmp_path / key_name).stat().st_mode & 0o777 == 0o600

    # The last line is the caBundle: base64 of the CA PEM; how to deploy them comes before it.
    assert base64.b64decode(lines[-1]) == (tmp_path / "ca.crt").read_bytes()
    assert any("kubectl apply -k deploy/overlays/no-cert-manager" in line for line in lines[:-1])


def test_a_second_run_reuses_the_files_and_force_replaces_them(tmp_path):
    first_lines = make_certs(tmp_path)
    first = snapshot(tmp_path)

    second_lines = make_certs(tmp_path)
    assert snapshot(tmp_path) == first
    assert second_lines[-1] == first_lines[-1]
    assert any("reused" in line for line in second_lines)

    forced_lines = make_certs(tmp_path, force=True)
    forced = snapshot(tmp_path)
    assert all(forced[name] != first[name] for name in FILES)
    assert forced_lines[-1] != first_lines[-1]
    ca, leaf = load(tmp_path)
    leaf.verify_directly_issued_by(ca)
    for key_name in ("ca.key", "tls.key"):
        assert (tmp_path / key_name).stat().st_mode & 0o777 == 0o600


def test_other_sans_reissue_the_serving_cert_with_the_same_ca(tmp_path):
    make_certs(tmp_path)
    before = snapshot(tmp_path)

    lines = make_certs(tmp_path, namespace="other")

    after = snapshot(tmp_path)
    assert after["ca.crt"] == before["ca.crt"]  # the caBundle in the cluster stays valid
    assert after["tls.crt"] != before["tls.crt"]
    ca, leaf = load(tmp_path)
    leaf.verify_directly_issued_by(ca)
    dns = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert "karpweb-webhook.other.svc" in dns
    assert any("SANs differ" in line for line in lines)


def test_a_serving_cert_from_another_ca_is_replaced(tmp_path):
    make_certs(tmp_path)
    foreign_cert, _ = make_ca("someone-else", "elsewhere", 30)
    (tmp_path / "ca.crt").write_bytes(foreign_cert.public_bytes(serialization.Encoding.PEM))

    make_certs(tmp_path)  # the CA no longer matches its key: everything is made again

    ca, leaf = load(tmp_path)
    leaf.verify_directly_issued_by(ca)
    assert ca.subject != foreign_cert.subject


def test_loose_key_permissions_are_narrowed(tmp_path):
    make_certs(tmp_path)
    (tmp_path / "tls.key").chmod(0o644)

    make_certs(tmp_path)

    assert (tmp_path / "tls.key").stat().st_mode & 0o777 == 0o600


def test_verbosity_0_prints_only_the_ca_bundle(tmp_path):
    lines = make_certs(tmp_path, verbosity=0)
    assert len(lines) == 1
    assert base64.b64decode(lines[0]) == (tmp_path / "ca.crt").read_bytes()


def test_default_out_is_under_var_dir(tmp_path, settings):
    settings.VAR_DIR = tmp_path / "var"
    stdout = io.StringIO()
    call_command("webhook_certs", stdout=stdout)
    assert all((tmp_path / "var" / "webhook-certs" / name).exists() for name in FILES)


@pytest.mark.parametrize(
    "options",
    [
        {"service": "Karpweb-Webhook"},
        {"service": "karpweb_webhook"},
        {"service": "1karpweb"},
        {"service": "karpweb-"},
        {"service": "karpweb.webhook"},
        {"service": ""},
        {"service": "a" * 64},
        {"namespace": "Karpweb"},
        {"namespace": "kube_system"},
        {"days": 0},
        {"days": 4000},
        {"days": 400, "ca_days": 300},
    ],
)
def test_bad_input_is_a_command_error(tmp_path, options):
    with pytest.raises(CommandError):
        make_certs(tmp_path / "certs", **options)
    assert not (tmp_path / "certs" / "ca.key").exists()


def test_out_that_is_a_file_is_a_command_error(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(CommandError, match="not a directory"):
        make_certs(tmp_path / "file")


# --------------------------------------------------------------------------------------------------
# gunicorn, webhook role, TLS


def admission_review(obj: dict, uid: str) -> dict:
    group, _, version = obj["apiVersion"].partition("/")
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": group, "version": version, "kind": obj["kind"]},
            "resource": {"group": group, "version": version, "resource": "ec2nodeclasses"},
            "requestKind": {"group": group, "version": version, "kind": obj["kind"]},
            "requestResource": {"group": group, "version": version, "resource": "ec2nodeclasses"},
            "name": obj["metadata"]["name"],
            "operation": "CREATE",
            "userInfo": {"username": "kubernetes-admin", "groups": ["system:authenticated"]},
            "object": obj,
            "oldObject": None,
            "dryRun": False,
        },
    }


@pytest.fixture
def webhook_server(tmp_path):
    """gunicorn -c deploy/gunicorn.conf.py in the webhook role, TLS, on a free port, against a fresh
    migrated SQLite database (subprocesses only: the test database is not involved)."""
    certs = tmp_path / "certs"
    port = free_port()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "karpweb.settings",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'webhook.sqlite3'}",
        "KARPWEB_VAR_DIR": str(tmp_path),
        "SECRET_KEY": secrets.token_urlsafe(40),
        "DEBUG": "0",
        "KARPWEB_ROLE": "webhook",
        "BIND": f"127.0.0.1:{port}",
        "WEBHOOK_CERT_FILE": str(certs / "tls.crt"),
        "WEBHOOK_KEY_FILE": str(certs / "tls.key"),
    }
    for name in ("PORT", "WEBHOOK_PORT", "WEBHOOK_CONCURRENCY", "WEBHOOK_THREADS", "ALLOWED_HOSTS"):
        env.pop(name, None)
    manage = [sys.executable, str(ROOT / "manage.py")]
    for args in (["webhook_certs", "--out", str(certs), "-v", "0"], ["migrate", "--noinput", "-v", "0"]):
        done = subprocess.run(manage + args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, f"{args[0]} failed:\n{done.stderr}"

    log_path = tmp_path / "gunicorn.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-c", str(ROOT / "deploy" / "gunicorn.conf.py"), WSGI_APP],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        yield {"url": f"https://127.0.0.1:{port}/webhook/validate", "ca": certs / "ca.crt", "proc": proc}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
        if proc.returncode not in (0, -15):
            print(log_path.read_text(errors="replace")[-4000:])


def post_when_up(server, body: dict, verify, deadline_s: float = 60.0) -> requests.Response:
    """POST once the server answers (workers may still be booting when the port opens)."""
    deadline = time.monotonic() + deadline_s
    while True:
        assert server["proc"].poll() is None, "gunicorn exited; see the captured log"
        try:
            return requests.post(server["url"], json=body, verify=verify, timeout=5)
        except requests.exceptions.SSLError:
            raise
        except (requests.ConnectionError, requests.Timeout):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.mark.slow
def test_gunicorn_serves_the_webhook_over_tls_verified_by_the_generated_ca(webhook_server, tmp_path, seed_ec2nodeclass):
    uid = str(uuid.uuid4())

    reply = post_when_up(webhook_server, admission_review(seed_ec2nodeclass, uid), verify=str(webhook_server["ca"]))

    assert reply.status_code == 200, reply.text[:2000]
    assert reply.headers["Content-Type"].startswith("application/json")
    body = reply.json()
    assert body["apiVersion"] == "admission.k8s.io/v1"
    assert body["kind"] == "AdmissionReview"
    assert body["response"]["uid"] == uid
    assert body["response"]["allowed"] is True

    # The verification is real: a CA that did not sign the serving certificate is refused.
    other_ca, _ = make_ca("karpweb-webhook", "karpweb", 1)
    other = tmp_path / "other-ca.crt"
    other.write_bytes(other_ca.public_bytes(serialization.Encoding.PEM))
    with pytest.raises(requests.exceptions.SSLError):
        requests.post(
            webhook_server["url"], json=admission_review(seed_ec2nodeclass, uid), verify=str(other), timeout=5
        )
