#!/usr/bin/env python3
"""Open-loop latency benchmark for the validating admission webhook (POST /webhook/validate),
beside a bare WSGI app measured in the same run; and a closed-loop throughput mode.

    .venv/bin/python bench/webhook_latency.py                    # 200 req/s for 20 s, plain and TLS, each
                                                                 # against the bare app and karpweb
    .venv/bin/python bench/webhook_latency.py --variants tls --rate 500 --duration 10 --workers 4
    .venv/bin/python bench/webhook_latency.py --concurrency 16   # throughput: 16 clients back to back
    .venv/bin/python bench/webhook_latency.py --url https://127.0.0.1:8443/webhook/validate \\
        --ca var/webhook-certs/ca.crt                            # a server that is already running

Without --url, for each variant (plain HTTP, TLS) it starts two servers in turn, never together:
the bare WSGI app of bench/bare_webhook.py (reads the review, echoes its uid; no Django) and
karpweb's webhook role, both with exactly the deployed gunicorn settings (deploy/gunicorn.conf.py,
KARPWEB_ROLE=webhook, the same --workers/--threads; WEBHOOK_TLS=false for plain) on a free port of
127.0.0.1, against certificates from manage.py webhook_certs and a throw-away migrated SQLite
database, and stops each at the end, also on Ctrl-C. The bare app's figures are the floor this
machine, gunicorn, HTTP and TLS set in this run: karpweb's minus the bare app's is karpweb's own
cost, and a slow run shows up in both. A summary table of all four closes the output.

Open loop, without coordinated omission: request i is due at start + i/rate whether or not earlier
requests have been answered, and its latency is measured from that due time, not from the moment a
sender got round to it. A dispatcher hands due requests to a pool of sender threads and starts another
thread whenever none is idle, so a slow response never holds back the next send (if the client itself
falls behind, that shows up as latency and in the "send lag" line, never as a silently lower rate).

Requests are AdmissionReview (admission.k8s.io/v1) CREATEs of the seed NodePool "general" and
EC2NodeClass "default" (2:1), over HTTPS verifying the CA (or plain HTTP). Connections are reused when
the server keeps them alive; gunicorn's sync worker closes every connection, so then each request
includes a TCP (+ TLS) handshake, which is also what the API server pays against that server (the
output says which). Latency percentiles cover every request, failed ones included (a timeout counts as
its full wait).

With --concurrency N there is no schedule: N clients each send their next request as soon as the last
is answered, for --duration seconds, which finds the most the server answers (its capacity, measured
with the client on the same machine: the CPU time the client used is printed beside it).

Stdlib only. Loopback only, bounded: at most --rate x --duration requests per server (plus the 2 s
warm-up), each with a 5 s timeout (the API server's timeoutSeconds); in throughput mode at most
--duration seconds per server.
"""

from __future__ import annotations

import argparse
import copy
import http.client
import ipaddress
import json
import math
import os
import queue
import secrets
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parent.parent
TARGET_P99_MS = 10.0
REQUEST_TIMEOUT = 5.0  # the ValidatingWebhookConfiguration's timeoutSeconds
WARMUP_SECONDS = 2.0
STARTUP_TIMEOUT = 60.0
MAX_SENDERS = 2000

# The seed manifests (karpweb's seed document), as the API server would pass
# them in request.object on CREATE (uid/creationTimestamp/generation are set before admission).
NODEPOOL = {
    "apiVersion": "karpenter.sh/v1",
    "kind": "NodePool",
    "metadata": {"name": "general"},
    "spec": {
        "template": {
            "spec": {
                "requirements": [
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]},
                    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]},
                    {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m", "c", "r"]},
                    {
                        "key": "karpenter.k8s.aws/instance-size",
                        "operator": "NotIn",
                        "values": ["nano", "micro", "small"],
                    },
                ],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            }
        },
        "limits": {"cpu": 1000, "memory": "1000Gi"},
        "disruption": {"consolidationPolicy": "WhenUnderutilized", "consolidateAfter": "30s"},
    },
}
EC2NODECLASS = {
    "apiVersion": "karpenter.k8s.aws/v1",
    "kind": "EC2NodeClass",
    "metadata": {"name": "default"},
    "spec": {
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
        "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "my-cluster"}}],
        "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "my-cluster"}}],
        "role": "KarpenterNodeRole-my-cluster",
    },
}
KINDS = {
    "NodePool": ("karpenter.sh", "nodepools", NODEPOOL),
    "EC2NodeClass": ("karpenter.k8s.aws", "ec2nodeclasses", EC2NODECLASS),
}


def admission_review(kind: str, uid: str) -> bytes:
    group, resource, manifest = KINDS[kind]
    obj = copy.deepcopy(manifest)
    obj["metadata"].update({"uid": str(uuid.uuid4()), "generation": 1, "creationTimestamp": "2026-11-29T12:00:00Z"})
    gvk = {"group": group, "version": "v1", "kind": kind}
    gvr = {"group": group, "version": "v1", "resource": resource}
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": gvk,
            "resource": gvr,
            "requestKind": gvk,
            "requestResource": gvr,
            "name": obj["metadata"]["name"],
            "operation": "CREATE",
            "userInfo": {
                "username": "kubernetes-admin",
                "groups": ["kubeadm:cluster-admins", "system:authenticated"],
            },
            "object": obj,
            "oldObject": None,
            "dryRun": False,
            "options": {
                "apiVersion": "meta.k8s.io/v1",
                "kind": "CreateOptions",
                "fieldManager": "kubectl-client-side-apply",
                "fieldValidation": "Strict",
            },
        },
    }
    return json.dumps(review, separators=(",", ":")).encode()


# --------------------------------------------------------------------------------------------------
# Server under test


def venv_python() -> str:
    candidate = REPO / ".venv" / "bin" / "python"
    return str(candidate) if candidate.exists() else sys.executable


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


APPS = {
    "bare": ("bench.bare_webhook:application", "bare WSGI app (echoes the uid)"),
    "karpweb": ("karpweb.wsgi:application", "karpweb webhook role"),
}
VARIANTS = ("plain", "tls")


class Workspace:
    """What every server of a run shares: certificates and a migrated throw-away SQLite database."""

    def __init__(self) -> None:
        self.tmp = tempfile.TemporaryDirectory(prefix="karpweb-bench-")
        self.dir = Path(self.tmp.name)
        self.certs = self.dir / "certs"
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "karpweb.settings",
            "DATABASE_URL": f"sqlite:///{self.dir / 'bench.sqlite3'}",
            "KARPWEB_VAR_DIR": str(self.dir),
            "SECRET_KEY": secrets.token_urlsafe(50),
            "DEBUG": "0",
            "KARPWEB_ROLE": "webhook",
            "WEBHOOK_CERT_FILE": str(self.certs / "tls.crt"),
            "WEBHOOK_KEY_FILE": str(self.certs / "tls.key"),
            "PYTHONUNBUFFERED": "1",
        }
        unset = ("PORT", "WEBHOOK_PORT", "WEB_CONCURRENCY", "WEBHOOK_ACCESS_LOG", "KARPWEB_PRODUCTION", "REDIS_URL")
        for name in unset:
            self.env.pop(name, None)

    @property
    def ca(self) -> Path:
        return self.certs / "ca.crt"

    def _manage(self, *args: str) -> None:
        cmd = [venv_python(), str(REPO / "manage.py"), *args]
        done = subprocess.run(cmd, cwd=REPO, env=self.env, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args[:1])} failed ({done.returncode}):\n{done.stderr[-3000:]}")

    def prepare(self) -> None:
        print(f"preparing: certificates and a migrated SQLite database in {self.dir}", flush=True)
        self._manage("webhook_certs", "--out", str(self.certs), "-v", "0")
        self._manage("migrate", "--noinput", "-v", "0")

    def cleanup(self) -> None:
        self.tmp.cleanup()


class Gunicorn:
    """One app under gunicorn with the webhook role's settings, plain or TLS; always stopped."""

    def __init__(self, workspace: Workspace, app: str, tls: bool, workers: int, threads: int):
        self.app_uri, self.label = APPS[app]
        self.tls = tls
        self.ca = workspace.ca
        self.workers = workers
        self.threads = threads
        self.port = free_port()
        self.log_path = workspace.dir / f"gunicorn-{app}-{'tls' if tls else 'plain'}.log"
        self.proc: subprocess.Popen | None = None
        self.env = {
            **workspace.env,
            "BIND": f"127.0.0.1:{self.port}",
            "WEBHOOK_CONCURRENCY": str(workers),
            "WEBHOOK_THREADS": str(threads),
            "WEBHOOK_TLS": "true" if tls else "false",
        }

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}/webhook/validate"

    @property
    def shape(self) -> str:
        kind = "sync worker(s)" if self.threads == 1 else f"gthread worker(s) x {self.threads} threads"
        return f"{self.workers} {kind}, {'TLS' if self.tls else 'plain HTTP'}"

    def start(self) -> None:
        gunicorn = Path(venv_python()).parent / "gunicorn"
        cmd = [str(gunicorn)] if gunicorn.exists() else [venv_python(), "-m", "gunicorn"]
        # The same configuration file for both apps: only the application differs.
        cmd += ["-c", str(REPO / "deploy" / "gunicorn.conf.py"), self.app_uri]
        log = self.log_path.open("wb")
        # Own session: Ctrl-C in the terminal reaches only this script, which then stops gunicorn.
        self.proc = subprocess.Popen(
            cmd, cwd=REPO, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        print(f"started: {self.label}, gunicorn pid {self.proc.pid}, {self.shape}, {self.url}", flush=True)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            try:
                proc.send_signal(signal.SIGTERM)  # graceful: the master stops its workers
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)  # the group this script created for it
                proc.wait(timeout=5)
            except ProcessLookupError:
                pass
            print(f"stopped: gunicorn pid {proc.pid}", flush=True)


# --------------------------------------------------------------------------------------------------
# Client


class Client:
    """Keep-alive HTTP(S) connections to one URL, shared by the sender threads (LIFO pool)."""

    def __init__(self, url: str, ca: Path | None):
        parts = urlsplit(url)
        if parts.scheme not in {"http", "https"} or not parts.hostname:
            raise SystemExit(f"--url {url!r}: expected http(s)://host:port/path")
        host = parts.hostname
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = host == "localhost"
        if not loopback:
            raise SystemExit(f"--url {url!r}: only loopback addresses (127.0.0.0/8, ::1, localhost)")
        self.host = host
        self.https = parts.scheme == "https"
        self.port = parts.port or (443 if self.https else 80)
        self.path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self.context = None
        if self.https:
            if ca is None or not ca.exists():
                raise SystemExit(f"CA file {ca} not found (pass --ca)")
            self.context = ssl.create_default_context(cafile=str(ca))  # verifies the chain and the SAN
        self.idle: queue.LifoQueue = queue.LifoQueue()
        self.lock = threading.Lock()
        self.opened = 0
        self.closed_by_server = 0

    def _connect(self) -> http.client.HTTPConnection:
        with self.lock:
            self.opened += 1
        if self.https:
            return http.client.HTTPSConnection(self.host, self.port, timeout=REQUEST_TIMEOUT, context=self.context)
        return http.client.HTTPConnection(self.host, self.port, timeout=REQUEST_TIMEOUT)

    def post(self, body: bytes) -> tuple[int, bytes]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        for attempt in (0, 1):
            try:
                # A retry goes on a new connection: another idle one may have been closed too.
                conn = self.idle.get_nowait() if attempt == 0 else self._connect()
                reused = attempt == 0
            except queue.Empty:
                conn = self._connect()
                reused = False
            try:
                conn.request("POST", self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, ssl.SSLEOFError):
                conn.close()
                # A kept-alive connection the server closed while it sat idle in the pool (keepalive
                # timeout): retry once on a new one. Go's transport, the API server's client, notices
                # such closes in the background and never sends on them.
                if reused and attempt == 0:
                    continue
                raise
            except BaseException:
                conn.close()
                raise
            if resp.will_close:
                conn.close()
                with self.lock:
                    self.closed_by_server += 1
            else:
                self.idle.put(conn)
            return resp.status, data
        raise AssertionError("unreachable")

    def close(self) -> None:
        while True:
            try:
                self.idle.get_nowait().close()
            except queue.Empty:
                return


@dataclass
class Results:
    latencies_ms: list[float] = field(default_factory=list)
    lags_ms: list[float] = field(default_factory=list)
    seconds: list[int] = field(default_factory=list)  # which second of the run each request was due in
    errors: Counter = field(default_factory=Counter)
    verdicts: Counter = field(default_factory=Counter)
    sent: int = 0
    first_due: float = 0.0
    last_done: float = 0.0


def post_and_check(client, body: bytes, uid: str) -> tuple[str | None, str | None]:
    """One review sent and judged: ``(error or None, verdict)``; a network failure is an
    error named by its type, never an exception out of a sender thread."""
    try:
        status, data = client.post(body)
        return check_reply(status, data, uid)
    except TimeoutError:
        return "timeout", None
    except (OSError, http.client.HTTPException) as exc:
        return type(exc).__name__, None


def check_reply(status: int, data: bytes, uid: str) -> tuple[str | None, str | None]:
    """(error, verdict): error is None for a well-formed AdmissionReview reply echoing uid."""
    if status != 200:
        return f"HTTP {status}", None
    try:
        reply = json.loads(data)
    except ValueError:
        return "reply not JSON", None
    if not isinstance(reply, dict):
        return "reply not an object", None
    if reply.get("apiVersion") != "admission.k8s.io/v1" or reply.get("kind") != "AdmissionReview":
        return "wrong apiVersion/kind", None
    response = reply.get("response")
    if not isinstance(response, dict) or response.get("uid") != uid:
        return "wrong uid", None
    if not isinstance(response.get("allowed"), bool):
        return "allowed not a bool", None
    return None, "allowed" if response["allowed"] else "denied"


def run_phase(client: Client, rate: float, seconds: float, label: str, stop: threading.Event) -> Results:
    """Send rate x seconds requests on an open-loop schedule; return what came back."""
    total = max(1, int(round(rate * seconds)))
    plan = []
    for i in range(total):
        kind = "EC2NodeClass" if i % 3 == 2 else "NodePool"
        uid = str(uuid.uuid4())
        plan.append((kind, uid, admission_review(kind, uid)))  # serialised up front, off the hot path

    results = Results()
    lock = threading.Lock()
    jobs: queue.SimpleQueue = queue.SimpleQueue()
    idle = [0]
    threads: list[threading.Thread] = []

    def sender() -> None:
        while True:
            job = jobs.get()
            if job is None:
                return
            with lock:
                idle[0] -= 1
            i, due = job
            kind, uid, body = plan[i]
            lag = time.perf_counter() - due
            error, verdict = post_and_check(client, body, uid)
            done = time.perf_counter()
            with lock:
                results.latencies_ms.append((done - due) * 1000)
                results.lags_ms.append(lag * 1000)
                results.seconds.append(int(i / rate))
                results.last_done = max(results.last_done, done)
                if error:
                    results.errors[error] += 1
                else:
                    results.verdicts[f"{kind} {verdict}"] += 1
                idle[0] += 1

    def spawn() -> None:
        t = threading.Thread(target=sender, name=f"sender-{len(threads)}", daemon=True)
        with lock:
            idle[0] += 1
        threads.append(t)
        t.start()

    # Enough senders for the usual case up front (rate x 50 ms in flight), more on demand.
    for _ in range(min(MAX_SENDERS, max(8, math.ceil(rate * 0.05)))):
        spawn()
    start = time.perf_counter() + 0.05
    results.first_due = start
    print(f"{label}: {total} requests at {rate:g}/s over {seconds:g} s", flush=True)
    try:
        for i in range(total):
            due = start + i / rate
            delay = due - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            with lock:
                starved = idle[0] <= 0
            if starved and len(threads) < MAX_SENDERS:
                spawn()
            jobs.put((i, due))
            results.sent += 1
    except KeyboardInterrupt:
        stop.set()
        raise
    finally:
        for _ in threads:
            jobs.put(None)
        # Every request has timed out by then (connect + read); on Ctrl-C do not wait for stragglers.
        deadline = time.perf_counter() + (0.5 if stop.is_set() else REQUEST_TIMEOUT * 2 + 1)
        for t in threads:
            t.join(max(0.0, deadline - time.perf_counter()))
    results.errors["unanswered at exit"] += results.sent - len(results.latencies_ms)
    results.errors += Counter()  # drop zero counts
    return results


def run_closed(client: Client, concurrency: int, seconds: float, label: str, stop: threading.Event) -> Results:
    """``concurrency`` clients, each sending its next request when the last is answered."""
    bodies = []
    for i in range(64):
        kind = "EC2NodeClass" if i % 3 == 2 else "NodePool"
        uid = str(uuid.uuid4())
        bodies.append((kind, uid, admission_review(kind, uid)))
    results = Results()
    lock = threading.Lock()
    start = time.perf_counter()
    end = start + seconds
    results.first_due = start
    print(f"{label}: {concurrency} clients back to back for {seconds:g} s", flush=True)

    def sender(n: int) -> None:
        i = n
        while not stop.is_set():
            sent = time.perf_counter()
            if sent >= end:
                return
            kind, uid, body = bodies[i % len(bodies)]
            i += concurrency
            error, verdict = post_and_check(client, body, uid)
            done = time.perf_counter()
            with lock:
                results.sent += 1
                results.latencies_ms.append((done - sent) * 1000)
                results.last_done = max(results.last_done, done)
                if error:
                    results.errors[error] += 1
                else:
                    results.verdicts[f"{kind} {verdict}"] += 1

    threads = [threading.Thread(target=sender, args=(n,), daemon=True) for n in range(concurrency)]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join()
    except KeyboardInterrupt:
        stop.set()
        raise
    return results


# --------------------------------------------------------------------------------------------------
# Report


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile (no interpolation: every figure is a latency that happened)."""
    if not sorted_values:
        return float("nan")
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


@dataclass
class Figures:
    """One server's line of the closing summary."""

    server: str
    variant: str
    app: str
    p50: float
    p90: float
    p99: float
    max: float
    errors: int
    rate: float  # answered correctly per second (open loop) or throughput (closed loop)


def report(
    res: Results, rate: float, duration: float, client: Client, server: str, per_second: bool = False
) -> tuple[float, float, float, float, int, float]:
    """Print one run's figures; return (p50, p90, p99, max, errors, answered correctly per second)."""
    lat = sorted(res.latencies_ms)
    lags = sorted(res.lags_ms)
    answered = len(lat)
    ok = sum(res.verdicts.values())
    errors = sum(res.errors.values())
    span = (res.last_done - res.first_due) if answered else duration
    p99 = percentile(lat, 99)
    err_detail = ", ".join(f"{k}: {v}" for k, v in res.errors.most_common())
    lag_text = f"{percentile(lags, 99):.2f} / {lags[-1]:.2f} ms (client-side delay, included above)" if lags else "-"
    rows = [
        ("server", server),
        ("requests sent", f"{res.sent}"),
        ("errors", f"{errors}  ({err_detail})" if errors else "0"),
        ("replies", ", ".join(f"{k}: {v}" for k, v in sorted(res.verdicts.items())) or "-"),
        ("target rate", f"{rate:g}/s"),
        ("achieved rate", f"{res.sent / span:.1f}/s sent, {ok / span:.1f}/s answered correctly"),
        ("p50", f"{percentile(lat, 50):.2f} ms"),
        ("p90", f"{percentile(lat, 90):.2f} ms"),
        ("p99", f"{p99:.2f} ms"),
        ("p99.9", f"{percentile(lat, 99.9):.2f} ms"),
        ("max", f"{lat[-1]:.2f} ms" if lat else "-"),
        (
            "target",
            f"p99 < {TARGET_P99_MS:g} ms: {'MET' if p99 < TARGET_P99_MS and not errors else 'NOT MET'}",
        ),
        ("send lag p99/max", lag_text),
        ("connections", f"{client.opened} opened for {res.sent} requests"),
    ]
    width = max(len(k) for k, _ in rows)
    print()
    for key, value in rows:
        print(f"  {key:<{width}}  {value}")
    print()
    if client.closed_by_server and client.closed_by_server >= ok - 1:
        print(
            "  note: the server closed the connection after every response (gunicorn sync workers do),\n"
            "        so each request above includes a new TCP + TLS handshake; the API server pays the\n"
            "        same against this server. WEBHOOK_THREADS>1 (gthread) keeps connections alive."
        )
    elif client.opened < res.sent:
        print("  note: connections were kept alive and reused, as the API server's client does.")
    print("  latency = reply time - scheduled send time (open loop); failed requests included.")
    if per_second:
        by_second: dict[int, list[float]] = {}
        for sec, ms in zip(res.seconds, res.latencies_ms, strict=True):
            by_second.setdefault(sec, []).append(ms)
        print("\n  second  requests     p50 ms     p99 ms     max ms")
        for sec in sorted(by_second):
            values = sorted(by_second[sec])
            print(
                f"  {sec:6d}  {len(values):8d}  {percentile(values, 50):9.2f}  {percentile(values, 99):9.2f}"
                f"  {values[-1]:9.2f}"
            )
    top = lat[-1] if lat else float("nan")
    return percentile(lat, 50), percentile(lat, 90), p99, top, errors, ok / span


def report_throughput(
    res: Results, concurrency: int, client: Client, server: str, cpu_seconds: float
) -> tuple[float, float, float, float, int, float]:
    """Print one run's figures; return (p50, p90, p99, max, errors, reviews answered per second)."""
    lat = sorted(res.latencies_ms)
    ok = sum(res.verdicts.values())
    errors = sum(res.errors.values())
    span = max(1e-9, res.last_done - res.first_due)
    rows = [
        ("server", server),
        ("clients", f"{concurrency}, each sending when answered (closed loop)"),
        ("requests", f"{res.sent} in {span:.1f} s"),
        ("errors", f"{errors}  ({', '.join(f'{k}: {v}' for k, v in res.errors.most_common())})" if errors else "0"),
        ("throughput", f"{ok / span:.0f} reviews/s answered correctly"),
        (
            "latency p50/p99/max",
            f"{percentile(lat, 50):.2f} / {percentile(lat, 99):.2f} / {lat[-1]:.2f} ms" if lat else "-",
        ),
        ("client CPU", f"{cpu_seconds:.1f} s of the {span:.1f} s (the client shares this machine's cores)"),
        ("connections", f"{client.opened} opened for {res.sent} requests (the rest kept alive since the warm-up)"),
    ]
    width = max(len(k) for k, _ in rows)
    print()
    for key, value in rows:
        print(f"  {key:<{width}}  {value}")
    print()
    top = lat[-1] if lat else float("nan")
    return percentile(lat, 50), percentile(lat, 90), percentile(lat, 99), top, errors, ok / span


def summary(figures: list[Figures], throughput: bool) -> None:
    """Every server of the run side by side, karpweb's beside the bare app's of the same variant."""
    print("\nsummary (measured one after the other in this run, on this machine)\n")
    rate = "reviews/s" if throughput else "answered/s"
    print(f"  {'server':<44} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8} {'errors':>7} {rate:>11}")
    for f in figures:
        print(
            f"  {f.server:<44} {f.p50:8.2f} {f.p90:8.2f} {f.p99:8.2f} {f.max:8.2f} {f.errors:7d} {f.rate:11.1f}"
        )
    print()
    for variant in VARIANTS:
        base = next((f for f in figures if f.variant == variant and f.app == "bare"), None)
        ours = next((f for f in figures if f.variant == variant and f.app == "karpweb"), None)
        if base is None or ours is None:
            continue
        line = (
            f"  {variant}: karpweb minus the bare app: p50 {ours.p50 - base.p50:+.2f} ms, "
            f"p99 {ours.p99 - base.p99:+.2f} ms"
        )
        if not throughput:
            met = ours.p99 < TARGET_P99_MS and not ours.errors
            line += f"; karpweb p99 < {TARGET_P99_MS:g} ms: {'MET' if met else 'NOT MET'}"
        print(line)


def measure(server: Gunicorn, args: argparse.Namespace, stop: threading.Event, variant: str, app: str) -> Figures:
    """Start ``server``, warm it up, measure it, stop it; its figures."""
    client = None
    try:
        server.start()
        client = Client(server.url, server.ca if server.tls else None)
        label = f"{server.label}, {server.shape}"
        wait_until_up(client, server)
        if args.concurrency:
            run_closed(client, args.concurrency, WARMUP_SECONDS, "warm-up", stop)
            client.opened = client.closed_by_server = 0
            cpu = time.process_time()
            res = run_closed(client, args.concurrency, args.duration, "measuring", stop)
            figures = report_throughput(res, args.concurrency, client, label, time.process_time() - cpu)
        else:
            run_phase(client, args.rate, WARMUP_SECONDS, "warm-up", stop)
            client.opened = client.closed_by_server = 0  # count the measured phase only
            res = run_phase(client, args.rate, args.duration, "measuring", stop)
            figures = report(res, args.rate, args.duration, client, label, per_second=args.per_second)
        return Figures(f"{server.label}, {variant}", variant, app, *figures)
    finally:
        if client is not None:
            client.close()
        server.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=200.0, help="requests per second (default 200)")
    ap.add_argument("--duration", type=float, default=20.0, help="measured seconds after a 2 s warm-up (default 20)")
    ap.add_argument("--workers", type=int, default=2, help="gunicorn worker processes (default 2)")
    ap.add_argument(
        "--threads", type=int, default=4, help="threads per worker, as WEBHOOK_THREADS; 1 = sync worker (default 4)"
    )
    ap.add_argument(
        "--variants",
        default=",".join(VARIANTS),
        help="comma-separated: plain (HTTP), tls (as deployed); each is measured for both apps (default both)",
    )
    ap.add_argument(
        "--apps",
        default=",".join(APPS),
        help="comma-separated: bare (the baseline), karpweb (the webhook role) (default both)",
    )
    ap.add_argument("--url", help="benchmark this running server (loopback only) instead of starting any")
    ap.add_argument("--ca", type=Path, help="CA to verify --url with (default <var>/webhook-certs/ca.crt)")
    ap.add_argument("--per-second", action="store_true", help="also print latency by second of the run")
    ap.add_argument(
        "--concurrency", type=int, help="throughput mode: this many clients back to back (no --rate schedule)"
    )
    args = ap.parse_args(argv)
    if not 0 < args.rate <= 5000:
        ap.error("--rate: expected 0 < rate <= 5000")
    if not 0 < args.duration <= 600:
        ap.error("--duration: expected 0 < seconds <= 600")
    if not 1 <= args.workers <= 64 or not 1 <= args.threads <= 64:
        ap.error("--workers/--threads: expected 1..64")
    if args.concurrency is not None and not 1 <= args.concurrency <= 256:
        ap.error("--concurrency: expected 1..256")
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    apps = [a.strip() for a in args.apps.split(",") if a.strip()]
    if not variants or set(variants) - set(VARIANTS):
        ap.error(f"--variants {args.variants!r}: expected a comma-separated choice of {', '.join(VARIANTS)}")
    if not apps or set(apps) - set(APPS):
        ap.error(f"--apps {args.apps!r}: expected a comma-separated choice of {', '.join(APPS)}")

    stop = threading.Event()

    def on_term(signum, frame):  # SIGTERM behaves like Ctrl-C: finish in the finally blocks below
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    if args.url:
        return measure_running(args, stop)
    workspace = Workspace()
    server = None
    figures: list[Figures] = []
    try:
        workspace.prepare()
        for variant in variants:
            for app in apps:  # the baseline first, then karpweb, each alone on the machine
                server = Gunicorn(workspace, app, variant == "tls", args.workers, args.threads)
                figures.append(measure(server, args, stop, variant, app))
                server = None
        summary(figures, throughput=bool(args.concurrency))
        return 0
    except KeyboardInterrupt:
        stop.set()
        print("\ninterrupted", file=sys.stderr)
        return 130
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        if server is not None:
            print(server.log_tail(), file=sys.stderr)
        return 1
    finally:
        if server is not None:
            server.stop()
        workspace.cleanup()


def measure_running(args: argparse.Namespace, stop: threading.Event) -> int:
    """--url: one server already running; no baseline can be measured beside it."""
    var = Path(os.environ.get("KARPWEB_VAR_DIR") or REPO / "var")
    ca = args.ca or var / "webhook-certs" / "ca.crt"
    client = Client(args.url, ca if args.url.startswith("https") else None)
    label = f"{args.url} (already running; no same-run baseline: run without --url for one)"
    try:
        wait_until_up(client, None)
        if args.concurrency:
            run_closed(client, args.concurrency, WARMUP_SECONDS, "warm-up", stop)
            client.opened = client.closed_by_server = 0
            cpu = time.process_time()
            res = run_closed(client, args.concurrency, args.duration, "measuring", stop)
            report_throughput(res, args.concurrency, client, label, time.process_time() - cpu)
        else:
            run_phase(client, args.rate, WARMUP_SECONDS, "warm-up", stop)
            client.opened = client.closed_by_server = 0
            res = run_phase(client, args.rate, args.duration, "measuring", stop)
            report(res, args.rate, args.duration, client, label, per_second=args.per_second)
        return 0
    except KeyboardInterrupt:
        stop.set()
        print("\ninterrupted", file=sys.stderr)
        return 130
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        client.close()


def wait_until_up(client: Client, server: Gunicorn | None) -> None:
    """Until the server answers any HTTP reply (404 counts: the route may not exist yet)."""
    deadline = time.monotonic() + STARTUP_TIMEOUT
    last = None
    probe = admission_review("EC2NodeClass", str(uuid.uuid4()))
    while time.monotonic() < deadline:
        if server is not None and not server.alive():
            raise RuntimeError("gunicorn exited during start-up")
        try:
            status, _ = client.post(probe)
            print(f"server answers (HTTP {status})", flush=True)
            return
        except ssl.SSLCertVerificationError as exc:
            raise RuntimeError(f"TLS verification failed: {exc}") from exc
        except (OSError, http.client.HTTPException) as exc:
            last = exc
            time.sleep(0.2)
    raise RuntimeError(f"server did not answer within {STARTUP_TIMEOUT:g} s (last error: {last})")


if __name__ == "__main__":
    sys.exit(main())
