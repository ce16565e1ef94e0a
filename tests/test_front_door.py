"""The front door: `make run` serves the platform and stops cleanly; settings come
from the environment; pages need a login."""

from __future__ import annotations

import ast
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
import requests
from django.core.exceptions import ImproperlyConfigured

from provisioning.launcher import free_port

ROOT = Path(__file__).resolve().parent.parent


def start_make_run(tmp_path: Path, port: int) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL", "DJANGO_SETTINGS_MODULE")}
    env.update(PORT=str(port), KARPWEB_VAR_DIR=str(tmp_path / "var"), PYTHONUNBUFFERED="1")
    # Its own session, so the test can check afterwards that the whole group is gone.
    return subprocess.Popen(
        ["make", "--no-print-directory", "run"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def read_until(proc: subprocess.Popen[str], pattern: str, timeout: float = 120) -> str:
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            if proc.poll() is not None:
                break
            continue
        seen.append(line)
        if re.search(pattern, line):
            keep_draining(proc)
            return "".join(seen)
    raise AssertionError(f"{pattern!r} not printed; output was:\n{''.join(seen)}")


def keep_draining(proc: subprocess.Popen[str]) -> None:
    """Read the rest of the output in the background: a pipe nobody reads fills up (64 KiB),
    and then every process of `make run` blocks on its next log line, shutdown included."""
    threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()


def stop_and_check_nothing_is_left(proc: subprocess.Popen[str]) -> None:
    pgid = os.getpgid(proc.pid)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    os.killpg(pgid, signal.SIGKILL)
    raise AssertionError("processes of `make run` were still running after it stopped")


@pytest.mark.slow
def test_make_run_serves_the_platform_and_sigterm_stops_everything(tmp_path):
    port = free_port()
    proc = start_make_run(tmp_path, port)
    try:
        output = read_until(proc, r"karpweb is running at")
        password = re.search(r"Created admin user: admin / (\S+)", output).group(1)
        assert "Seeded demo NodePool general" in output
        base = f"http://127.0.0.1:{port}"
        session = requests.Session()
        first = session.get(base + "/", allow_redirects=False, timeout=10)
        assert first.status_code == 302 and first.headers["Location"].startswith("/accounts/login/")
        login = session.get(base + "/accounts/login/", timeout=10)
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login.text).group(1)
        page = session.post(
            base + "/accounts/login/",
            data={"username": "admin", "password": password, "csrfmiddlewaretoken": token, "next": "/"},
            headers={"Referer": base + "/accounts/login/"},
            timeout=10,
        )
        assert page.status_code == 200 and "Overview" in page.text
        assert "general" in page.text and "default" in page.text
        assert session.get(base + "/readyz", timeout=10).json()["checks"] == {"database": "ok", "redis": "ok"}
        assert session.get(base + "/static/vendor/htmx-2.0.11.min.js", timeout=10).status_code == 200
    finally:
        stop_and_check_nothing_is_left(proc)
    # A second run keeps the admin and does not seed the demo again.
    proc = start_make_run(tmp_path, port)
    try:
        output = read_until(proc, r"karpweb is running at")
        assert "Admin user exists" in output and "Seeded demo" not in output
    finally:
        stop_and_check_nothing_is_left(proc)


def test_pages_need_a_login(client):
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/?next=/"


@pytest.mark.django_db
def test_the_overview_lists_policies_for_a_logged_in_user(admin_client, seed_nodepool, seed_ec2nodeclass):
    from provisioning.services.policy import apply_manifest, delete_resource

    apply_manifest(seed_ec2nodeclass, source="cli", actor="alice")
    apply_manifest(seed_nodepool, source="cli", actor="alice")
    text = admin_client.get("/").content.decode()
    assert "general" in text and "KarpenterNodeRole-my-cluster" in text and "al2023@latest" in text
    assert "missing" not in text
    delete_resource("EC2NodeClass", "default", source="cli")
    page = admin_client.get("/")
    assert page.status_code == 200
    assert "missing" in page.content.decode()  # its EC2NodeClass is gone
    detail = admin_client.get("/policies/NodePool/general/")
    assert "consolidationPolicy: WhenUnderutilized" in detail.content.decode()
    assert "WhenUnderutilized" in detail.context["warnings"][0]


def test_health_endpoints(client, db):
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json()["checks"]["database"] == "ok"


def test_readyz_checks_a_real_redis(client, db, settings, redis_url):
    settings.REDIS_URL = redis_url
    assert client.get("/readyz").json()["checks"]["redis"] == "ok"
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
    response = client.get("/readyz")
    assert response.status_code == 503 and response.json()["checks"]["redis"].startswith("error")


def test_security_headers(client):
    response = client.get("/accounts/login/")
    assert response["X-Frame-Options"] == "DENY"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Referrer-Policy"] == "same-origin"
    policy = response["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
    assert "unsafe-inline" not in policy and "unsafe-eval" not in policy


def test_settings_defaults_are_safe():
    env = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "ALLOWED_HOSTS")}
    code = "from django.conf import settings; print(settings.DEBUG, settings.ALLOWED_HOSTS)"
    out = subprocess.run(
        [str(ROOT / ".venv/bin/python"), "-c", f"import django; django.setup(); {code}"],
        env={**env, "DJANGO_SETTINGS_MODULE": "karpweb.settings"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip() == "False ['127.0.0.1', 'localhost']"


@pytest.mark.parametrize(
    "reader, raw, message",
    [
        ("env_bool", "maybe", "DEBUG='maybe': expected one of true/false"),
        ("env_int", "ten", "DEBUG='ten': expected an integer"),
        ("env_float", "x", "DEBUG='x': expected a number"),
    ],
)
def test_junk_in_an_environment_variable_is_named(monkeypatch, reader, raw, message):
    from karpweb import env

    monkeypatch.setenv("DEBUG", raw)
    with pytest.raises(ImproperlyConfigured, match=re.escape(message)):
        getattr(env, reader)("DEBUG", 0)


def test_secret_from_a_mounted_file(monkeypatch, tmp_path):
    from karpweb.env import env_str

    (tmp_path / "key").write_text("s3cret\n")
    monkeypatch.setenv("SECRET_KEY_FILE", str(tmp_path / "key"))
    assert env_str("SECRET_KEY") == "s3cret"


PURE = ["provisioning/crd", "provisioning/scheduling", "provisioning/disruption"]
FORBIDDEN = {"django", "rest_framework", "celery", "boto3", "botocore", "kubernetes", "redis"}


@pytest.mark.parametrize("package", PURE)
def test_the_pure_core_imports_no_framework(package):
    folder = ROOT / package
    if not folder.exists():
        pytest.skip(f"{package} does not exist yet")
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in FORBIDDEN, f"{path} imports {name}"
