"""Production settings (``KARPWEB_PRODUCTION=true``, as the deploy's ConfigMap sets it): real
secrets or no start, defaults for a TLS ingress, and ``check --deploy`` clean for the production
overlay; and the key file a checkout makes for itself."""

from __future__ import annotations

import os
import secrets
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from karpweb.secret import local_secret_key

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import check_deploy  # noqa: E402

GOOD_KEY = secrets.token_urlsafe(50)
SETTINGS_SHOWN = [
    "DEBUG",
    "SESSION_COOKIE_SECURE",
    "CSRF_COOKIE_SECURE",
    "SECURE_PROXY_SSL_HEADER",
    "SECURE_SSL_REDIRECT",
    "SECURE_HSTS_SECONDS",
    "SECURE_HSTS_INCLUDE_SUBDOMAINS",
    "SECURE_HSTS_PRELOAD",
    "ALLOWED_HOSTS",
]


def settings_in(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Load karpweb.settings in a fresh process with only ``env`` set (and print a few of them)."""
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    code = (
        "import django; django.setup(); from django.conf import settings; "
        f"print({{name: getattr(settings, name) for name in {SETTINGS_SHOWN!r}}})"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**keep, "DJANGO_SETTINGS_MODULE": "karpweb.settings", "KARPWEB_VAR_DIR": str(tmp_path), **env},
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.parametrize(
    ("key", "message"),
    [
        (None, "SECRET_KEY is not set. With KARPWEB_PRODUCTION=true every replica must use the same secret"),
        ("", "SECRET_KEY is not set."),
        ("REPLACE_ME", "SECRET_KEY is the placeholder 'REPLACE_ME', not a secret"),
        ("django-insecure-" + "x1y2z3" * 10, "SECRET_KEY is the placeholder 'django-insecure-'"),
        ("s3cret-but-short", "SECRET_KEY is only 16 characters long: set SECRET_KEY"),
        ("a" * 64, "SECRET_KEY has only 1 different characters, not a random secret"),
    ],
)
def test_production_refuses_to_start_without_a_real_secret_key(tmp_path, key, message):
    env = {"KARPWEB_PRODUCTION": "true"}
    if key is not None:
        env["SECRET_KEY"] = key
    done = settings_in(tmp_path, **env)
    assert done.returncode != 0
    assert "django.core.exceptions.ImproperlyConfigured: " + message in done.stderr
    assert "secrets.token_urlsafe(50)" in done.stderr  # how to make one
    assert not (tmp_path / "secret_key").exists()  # no per-replica key was made instead


def test_production_refuses_the_secret_templates_placeholders_and_debug(tmp_path):
    import yaml

    template = yaml.safe_load((ROOT / "deploy" / "secret.example.yaml").read_text())["stringData"]
    done = settings_in(tmp_path, KARPWEB_PRODUCTION="true", SECRET_KEY=template["SECRET_KEY"])
    assert "SECRET_KEY is the placeholder 'REPLACE_ME'" in done.stderr
    token = template["KARPWEB_METRICS_TOKEN"]
    done = settings_in(tmp_path, KARPWEB_PRODUCTION="true", SECRET_KEY=GOOD_KEY, KARPWEB_METRICS_TOKEN=token)
    assert "KARPWEB_METRICS_TOKEN is the placeholder 'REPLACE_ME'" in done.stderr
    done = settings_in(tmp_path, KARPWEB_PRODUCTION="true", SECRET_KEY=GOOD_KEY, KARPWEB_METRICS_TOKEN="short")
    assert "KARPWEB_METRICS_TOKEN is only 5 characters long" in done.stderr and "at least 32" in done.stderr
    done = settings_in(tmp_path, KARPWEB_PRODUCTION="true", SECRET_KEY=GOOD_KEY, DEBUG="true")
    assert "DEBUG=true with KARPWEB_PRODUCTION=true" in done.stderr


def test_production_defaults_suit_a_tls_ingress(tmp_path):
    done = settings_in(tmp_path, KARPWEB_PRODUCTION="true", SECRET_KEY=GOOD_KEY, POD_IP="10.0.3.7")
    assert done.returncode == 0, done.stderr
    shown = eval(done.stdout)  # a dict of plain values, printed by the settings we just loaded
    assert shown == {
        "DEBUG": False,
        "SESSION_COOKIE_SECURE": True,
        "CSRF_COOKIE_SECURE": True,
        "SECURE_PROXY_SSL_HEADER": ("HTTP_X_FORWARDED_PROTO", "https"),
        "SECURE_SSL_REDIRECT": True,
        "SECURE_HSTS_SECONDS": 31536000,
        "SECURE_HSTS_INCLUDE_SUBDOMAINS": True,
        "SECURE_HSTS_PRELOAD": False,
        "ALLOWED_HOSTS": ["127.0.0.1", "localhost", "10.0.3.7"],
    }
    # Each is a setting of its own.
    done = settings_in(
        tmp_path,
        KARPWEB_PRODUCTION="true",
        SECRET_KEY=GOOD_KEY,
        SECURE_PROXY_SSL_HEADER="X-Forwarded-Scheme",
        SECURE_SSL_REDIRECT="false",
        SECURE_HSTS_SECONDS="600",
        SECURE_COOKIES="false",
    )
    shown = eval(done.stdout)
    assert shown["SECURE_PROXY_SSL_HEADER"] == ("HTTP_X_FORWARDED_SCHEME", "https")
    assert (shown["SECURE_SSL_REDIRECT"], shown["SECURE_HSTS_SECONDS"], shown["SESSION_COOKIE_SECURE"]) == (
        False,
        600,
        False,
    )


def test_a_role_that_does_not_exist_is_named(tmp_path):
    done = settings_in(tmp_path, KARPWEB_ROLE="worker")
    assert "KARPWEB_ROLE='worker': expected web or webhook" in done.stderr


def test_a_checkout_keeps_its_embedded_defaults(tmp_path):
    """`make run` and the tests: no production, so no TLS assumptions and a key of its own."""
    done = settings_in(tmp_path)
    assert done.returncode == 0, done.stderr
    shown = eval(done.stdout)
    assert shown["SECURE_PROXY_SSL_HEADER"] is None and shown["SECURE_SSL_REDIRECT"] is False
    assert shown["SECURE_HSTS_SECONDS"] == 0 and shown["SESSION_COOKIE_SECURE"] is False
    assert (tmp_path / "secret_key").is_file()


def test_the_key_file_is_made_0600_in_one_step(tmp_path, monkeypatch):
    # Whatever the umask, the file never exists with wider permissions (no chmod afterwards).
    seen_modes = []
    real_open = os.open

    def watching_open(path, flags, mode=0o777, *args, **kwargs):
        if str(path).endswith("secret_key") and flags & os.O_CREAT:
            assert flags & os.O_EXCL
            seen_modes.append(mode)
        return real_open(path, flags, mode, *args, **kwargs)

    monkeypatch.setattr(os, "open", watching_open)
    old_umask = os.umask(0o000)
    try:
        key = local_secret_key(tmp_path / "var")
    finally:
        os.umask(old_umask)
    path = tmp_path / "var" / "secret_key"
    assert seen_modes == [0o600]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text() == key and len(key) >= 50
    assert local_secret_key(tmp_path / "var") == key  # read, not made again


def test_processes_starting_together_share_one_key(tmp_path):
    keys: list[str] = []
    threads = [threading.Thread(target=lambda: keys.append(local_secret_key(tmp_path))) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(keys) == 8 and len(set(keys)) == 1


@pytest.mark.slow
def test_check_deploy_is_clean_for_the_production_overlay(capsys):
    """CI runs this (and `make check-deploy`): every warning of `manage.py check --deploy` for the
    web and the webhook pods of deploy/overlays/production fails it."""
    assert check_deploy.main([]) == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    assert out.count("clean") == len(check_deploy.SERVING)


@pytest.mark.slow
def test_check_deploy_fails_on_a_warning(tmp_path):
    docs = check_deploy.render(ROOT / "deploy" / "overlays" / "production")
    env = check_deploy.pod_env(docs, "karpweb-web", check_deploy.filled_secret())
    env["SECURE_HSTS_SECONDS"] = "0"
    done = check_deploy.check(env, tmp_path)
    assert done.returncode != 0 and "security.W004" in done.stderr + done.stdout
