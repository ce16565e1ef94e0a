"""Metrics across the processes of a pod: gunicorn's workers and a Celery worker's pool count
in shared files, so every scrape sees the sum, whichever process answers it (a web worker, the
webhook role's gunicorn master, a Celery worker's main process)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import requests
from builders import deployment
from django.db import connection
from prometheus_client.parser import text_string_to_metric_families

from provisioning.cluster import simulated
from provisioning.launcher import free_port, wait_for_port

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def samples(url: str) -> dict[str, float]:
    """Unlabelled and labelled samples of one scrape, keyed by name and label values."""
    text = requests.get(url, timeout=10).text
    return {
        f"{s.name}{sorted(s.labels.values())}" if s.labels else s.name: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def test_every_scrape_of_gunicorn_sums_all_its_workers(tmp_path):
    env = {**os.environ, "KARPWEB_VAR_DIR": str(tmp_path), "DJANGO_SETTINGS_MODULE": "karpweb.settings"}
    for name in ("DATABASE_URL", "REDIS_URL", "PROMETHEUS_MULTIPROC_DIR"):
        env.pop(name, None)  # a fresh SQLite file; one replica, no lease to share
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True)
    port, metrics_port = free_port(), free_port()
    # The webhook role, which counts reviews; plain HTTP, so no certificates are needed. Its
    # master serves what the workers counted on a port of its own.
    env.update(KARPWEB_ROLE="webhook", BIND=f"127.0.0.1:{port}", WEBHOOK_CONCURRENCY="3", WEBHOOK_THREADS="1")
    env.update(WEBHOOK_TLS="false", KARPWEB_METRICS_PORT=str(metrics_port), KARPWEB_METRICS_ADDR="127.0.0.1")
    argv = [
        sys.executable,
        "-m",
        "gunicorn",
        "-c",
        str(ROOT / "deploy" / "gunicorn.conf.py"),
        "karpweb.wsgi:application",
    ]
    log = (tmp_path / "gunicorn.log").open("wb")
    before = set(_metrics_dirs())
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for_port(port, timeout=30, proc=proc)
        [directory] = set(_metrics_dirs()) - before  # made by this server for its workers
        for _ in range(12):  # spread over the three sync workers by the kernel
            requests.post(f"http://127.0.0.1:{port}/webhook/validate", data="not json", timeout=10)
        url = f"http://127.0.0.1:{metrics_port}/metrics"
        counts = {samples(url)["karpweb_webhook_request_duration_seconds_count['', '', 'error']"] for _ in range(9)}
        assert counts == {12.0}
    finally:
        stop(proc)
        log.close()
    assert not directory.exists()  # removed when gunicorn exits


def _metrics_dirs() -> list[Path]:
    pattern = "karpweb-webhook-metrics-*"
    return [*Path("/dev/shm").glob(pattern), *Path(tempfile.gettempdir()).glob(pattern)]


def _database_url() -> str:
    s = connection.settings_dict
    if s["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{Path(s['NAME']).resolve()}"
    auth = s["USER"] + (f":{s['PASSWORD']}" if s.get("PASSWORD") else "")
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


@pytest.mark.django_db(transaction=True)
def test_a_celery_worker_serves_what_its_pool_counted(clean_redis, redis_url, tmp_path):
    # Pods nothing can place (no NodePool): the worker's beat finds them, the window closes,
    # and a provisioning run records a Decision, all in the pool's processes.
    simulated.apply_pods(simulated.workload_pods([deployment("web", 3)])[0])
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": _database_url(),
        "REDIS_URL": redis_url,
        "KARPWEB_VAR_DIR": str(tmp_path),
        "KARPWEB_METRICS_PORT": str(port),
        "KARPWEB_METRICS_ADDR": "127.0.0.1",
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics"),
        "DJANGO_SETTINGS_MODULE": "karpweb.settings",
    }
    (tmp_path / "metrics").mkdir()
    argv = [sys.executable, "-m", "celery", "-A", "karpweb", "worker", "--beat", "--concurrency", "2"]
    argv += ["--schedule", str(tmp_path / "beat-schedule"), "--without-gossip", "--without-mingle"]
    log = (tmp_path / "worker.log").open("wb")
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for_port(port, timeout=60, proc=proc)
        deadline = time.monotonic() + 60
        seen: dict[str, float] = {}
        while time.monotonic() < deadline and not seen.get("karpweb_provisioning_pods_count"):
            time.sleep(0.5)
            seen = samples(f"http://127.0.0.1:{port}/metrics")
        assert seen.get("karpweb_provisioning_pods_count") == 1, (tmp_path / "worker.log").read_text()[-3000:]
        assert seen["karpweb_provisioning_pods_sum"] == 3
        assert seen["karpweb_batch_window_seconds_count"] >= 1
        assert seen["karpenter_scheduler_scheduling_duration_seconds_count['provisioner']"] == 1
    finally:
        stop(proc)
        log.close()
