"""bench/webhook_latency.py as a user runs it, briefly: each variant (plain HTTP, TLS) measures the
bare WSGI baseline and karpweb's webhook role one after the other, and the summary puts them side
by side. Figures are printed, never judged here (a timing decides no test)."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import bare_webhook  # noqa: E402


def test_the_baseline_echoes_the_uid_and_allows():
    uid = str(uuid.uuid4())
    body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": uid}})
    started = []
    environ = {"CONTENT_LENGTH": str(len(body)), "wsgi.input": io.BytesIO(body.encode())}
    reply = json.loads(b"".join(bare_webhook.application(environ, lambda status, headers: started.append(status))))
    assert started == ["200 OK"]
    assert reply == {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": uid, "allowed": True},
    }


@pytest.mark.slow
def test_the_bench_measures_karpweb_beside_the_baseline_plain_and_tls():
    done = subprocess.run(
        [sys.executable, "bench/webhook_latency.py", "--duration", "1", "--rate", "50"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = done.stdout.split("summary (measured one after the other in this run, on this machine)")[1]
    rows = re.findall(r"^  (.+?), (plain|tls) +[\d.]+ +[\d.]+ +[\d.]+ +[\d.]+ +(\d+) +[\d.]+$", summary, re.M)
    assert rows == [
        ("bare WSGI app (echoes the uid)", "plain", "0"),
        ("karpweb webhook role", "plain", "0"),
        ("bare WSGI app (echoes the uid)", "tls", "0"),
        ("karpweb webhook role", "tls", "0"),
    ]
    assert "plain: karpweb minus the bare app: p50" in summary and "tls: karpweb minus the bare app: p50" in summary
    # Each server served what it should: the same flags, plain then TLS.
    assert done.stdout.count("2 gthread worker(s) x 4 threads, plain HTTP, http://") == 2
    assert done.stdout.count("2 gthread worker(s) x 4 threads, TLS, https://") == 2
