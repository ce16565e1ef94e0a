"""gunicorn settings for both karpweb roles, chosen by ``KARPWEB_ROLE``.

    KARPWEB_ROLE=web      (default) the dashboard/API: plain HTTP on 0.0.0.0:$PORT (8000); TLS is
                          terminated by the ingress/load balancer in front.
    KARPWEB_ROLE=webhook  the validating admission webhook: HTTPS on 0.0.0.0:$WEBHOOK_PORT (8443),
                          called only by the Kubernetes API server. Django serves this role's own
                          URLconf (karpweb/urls_webhook.py): the webhook and its probes. The
                          workers' metrics are served by the master on KARPWEB_METRICS_PORT.

    gunicorn -c deploy/gunicorn.conf.py karpweb.wsgi:application

Environment (all optional):
    BIND                 bind address for either role (e.g. 127.0.0.1:9000), overrides PORT/WEBHOOK_PORT
    PORT                 web port (8000)
    WEB_CONCURRENCY      web worker processes (2 x cores + 1, at most 8)
    WEB_THREADS          threads per web worker (1 = sync worker; >1 = gthread, keeps connections alive)
    WEBHOOK_PORT         webhook port (8443)
    WEBHOOK_CONCURRENCY  webhook worker processes (2)
    WEBHOOK_THREADS      threads per webhook worker (4 = gthread, keeps connections alive; 1 = sync)
    WEBHOOK_TLS          false: the webhook role serves plain HTTP (a check or benchmark without
                         certificates; the API server itself only calls HTTPS) (true)
    WEBHOOK_CERT_FILE    serving certificate (<var>/webhook-certs/tls.crt)
    WEBHOOK_KEY_FILE     serving key (<var>/webhook-certs/tls.key)
    WEBHOOK_ACCESS_LOG   1 to log every admission request (off)
    KARPWEB_VAR_DIR      the var directory (<repo>/var), as in karpweb.settings
    GUNICORN_CONTROL_SOCKET  path of gunicorn's control socket (off unless set)
    PROMETHEUS_MULTIPROC_DIR where the workers keep their metrics (a fresh directory per server,
                         removed at exit, unless set)
    KARPWEB_METRICS_PORT the webhook role: the master serves its workers' metrics on this port, plain
                         HTTP without a token, outside Django (provisioning/observability/port.py);
                         unset, none. The web role serves /metrics on its own port and ignores it.
    KARPWEB_METRICS_ADDR the address of that port (0.0.0.0)
    KARPWEB_LOG_FORMAT   json: gunicorn's own lines are JSON too, access lines with their request id

This file is read by gunicorn only (it is not imported by Django), so it uses plain os.environ.
"""

from __future__ import annotations

import gc
import math
import os
import shutil
import sys
import tempfile
from pathlib import Path

REPO_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("KARPWEB_VAR_DIR") or REPO_DIR / "var")
ROLE = (os.environ.get("KARPWEB_ROLE") or "web").strip().lower()
if ROLE not in {"web", "webhook"}:
    sys.exit(f"gunicorn.conf.py: KARPWEB_ROLE={ROLE!r}: expected 'web' or 'webhook'")


def _int(name: str, default: int, minimum: int = 1) -> int:
    raw = (os.environ.get(name) or "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        sys.exit(f"gunicorn.conf.py: {name}={raw!r}: expected an integer")
    if value < minimum:
        sys.exit(f"gunicorn.conf.py: {name}={raw!r}: expected an integer >= {minimum}")
    return value


def _flag(name: str) -> bool:
    return (os.environ.get(name) or "").strip().lower() in {"1", "true", "yes", "on"}


def _cores() -> int:
    """CPUs this container may actually use: the affinity mask, narrowed by a cgroup v2 quota.

    os.cpu_count() reports the host's CPUs, which overstates a pod limited to 2 CPUs on a 64-core
    node and would start far too many workers.
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, cores)


wsgi_app = "karpweb.wsgi:application"
# Run from the repository so "karpweb.wsgi" imports whatever the working directory is.
chdir = str(REPO_DIR)
proc_name = f"karpweb-{ROLE}"

# Errors and worker lifecycle go to stderr, where the container runtime collects them.
errorlog = "-"
loglevel = os.environ.get("GUNICORN_LOG_LEVEL", "info")

# gunicorn >= 25 opens a control socket at $HOME/.gunicorn/gunicorn.ctl by default. Both roles (and
# tests running side by side) would fight over that one path, and a read-only root filesystem
# cannot create it; it stays off unless a path is given.
if os.environ.get("GUNICORN_CONTROL_SOCKET"):
    control_socket = os.environ["GUNICORN_CONTROL_SOCKET"]
else:
    control_socket_disable = True

# Workers prove they are alive by touching a heartbeat file; on a container's overlay filesystem
# that write can stall behind disk I/O and get a healthy worker killed. /dev/shm is memory.
if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
    worker_tmp_dir = "/dev/shm"

if ROLE == "web":
    bind = [os.environ.get("BIND") or f"0.0.0.0:{_int('PORT', 8000)}"]
    # Sync workers are CPU-bound Django processes: 2 x cores + 1 keeps every core busy while some
    # workers wait on the database. Capped at 8 because each worker holds its own DB connection
    # (conn_max_age) and ~60-100 MB of RAM; past 8 the database, not gunicorn, is the limit.
    workers = _int("WEB_CONCURRENCY", min(2 * _cores() + 1, 8))
    # >1 switches gunicorn to the gthread worker (keep-alive, slow clients do not pin a process).
    threads = _int("WEB_THREADS", 1)
    # A page that takes longer than 30 s is broken; kill the worker rather than queue behind it.
    timeout = 30
    # On SIGTERM (rolling update) let in-flight requests finish, well inside Kubernetes' default
    # 30 s terminationGracePeriodSeconds so the pod is never SIGKILLed mid-response.
    graceful_timeout = 20
    # Longer than the usual 2 s: behind a load balancer a kept-alive connection saves a TCP
    # handshake per HTMX poll. Must stay below the balancer's idle timeout (60 s on AWS ALB) so
    # the server never closes a connection the balancer is about to reuse. Sync workers ignore it.
    keepalive = 5
    # Access log on stdout: one line per request for the dashboard, which is low volume.
    accesslog = "-"
else:
    bind = [os.environ.get("BIND") or f"0.0.0.0:{_int('WEBHOOK_PORT', 8443)}"]
    # Admission reviews are small and CPU-bound (a few ms of Python each); the API server is the only
    # client and calls at kubectl/GitOps rates. Two processes give redundancy when one is busy or being
    # recycled; raise it (or the replica count) only if the bench shows queueing.
    workers = _int("WEBHOOK_CONCURRENCY", 2)
    # The API server keeps its connections to a webhook alive; sync workers would close each one and
    # make every admission call pay a TCP+TLS handshake (~1 ms here, more in a cluster). gthread with
    # a few threads keeps them open; set WEBHOOK_THREADS=1 for plain sync workers.
    threads = _int("WEBHOOK_THREADS", 4)
    # The API server abandons a call after timeoutSeconds (5 s here) and applies failurePolicy; a
    # worker stuck for 10 s is serving nobody and is better restarted.
    timeout = 10
    # Nothing in flight is worth waiting for past the API server's own 5 s deadline.
    graceful_timeout = 5
    # With gthread: keep an idle API server connection open a little longer than the default 2 s.
    keepalive = 5
    # An access log line per admission call costs a write on the hot path; off unless asked for.
    accesslog = "-" if _flag("WEBHOOK_ACCESS_LOG") else None

    _tls = (os.environ.get("WEBHOOK_TLS") or "true").strip().lower()
    if _tls not in {"1", "true", "yes", "on", "0", "false", "no", "off"}:
        sys.exit(f"gunicorn.conf.py: WEBHOOK_TLS={_tls!r}: expected true or false")
    if _tls in {"1", "true", "yes", "on"}:
        certs = VAR_DIR / "webhook-certs"
        certfile = os.environ.get("WEBHOOK_CERT_FILE") or str(certs / "tls.crt")
        keyfile = os.environ.get("WEBHOOK_KEY_FILE") or str(certs / "tls.key")
        # Fail at start with a clear message instead of an ssl traceback from every worker.
        for _path in (certfile, keyfile):
            if not os.access(_path, os.R_OK):
                sys.exit(
                    f"gunicorn.conf.py: webhook role needs a readable {_path}; run "
                    "`python manage.py webhook_certs` or set WEBHOOK_CERT_FILE/WEBHOOK_KEY_FILE "
                    "(cert-manager: mount the karpweb-webhook-tls Secret), or WEBHOOK_TLS=false for plain HTTP"
                )


def post_worker_init(worker):
    """Do the worker's first full garbage collection now, before it serves anything.

    A fresh worker holds ~65k long-lived objects from importing Django and the app; the first
    generation-2 collection walks all of them (~30 ms here) and lands on whichever request happens to
    trigger it: measured as one 35-50 ms outlier per worker, seconds into a benchmark. Collecting at
    boot and freezing the survivors moves that cost out of the request path and keeps later full
    collections small (frozen objects are never scanned again).
    """
    gc.collect()
    gc.freeze()


# Metrics: each worker counts in its own file under this directory and a scrape sums them all
# (prometheus_client's multiprocess mode): the web role's /metrics, served by any worker, and the
# webhook role's metrics port, served by the master (when_ready below). One directory per server,
# made before the workers are forked: they inherit it and read it when prometheus_client is imported.
METRICS_DIR_PREFIX = f"karpweb-{ROLE}-metrics-"
if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    _shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix=METRICS_DIR_PREFIX, dir=_shm)


def when_ready(server):
    """The webhook role: serve the workers' metrics on KARPWEB_METRICS_PORT from the master.

    The port the API server calls serves the webhook and its probes only; Prometheus scrapes this
    plain-HTTP port instead, which no Service exposes. The master serves from a thread of its own
    whatever the workers (forked next, and any that replace them) count in the directory above,
    as a Celery worker's main process serves its pool's (provisioning/observability/port.py).
    """
    if ROLE != "webhook":
        return
    from provisioning.observability import port

    try:
        port.serve(server.log)
    except (ValueError, OSError) as exc:
        on_exit(server)
        # gunicorn prints a RuntimeError as "Error: ..." and exits 1, before any worker starts.
        raise RuntimeError(f"gunicorn.conf.py: {exc}") from None


def on_exit(server):
    """Remove the metrics directory made above (one given in the environment is left alone)."""
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR", "")
    if os.path.basename(directory).startswith(METRICS_DIR_PREFIX):
        shutil.rmtree(directory, ignore_errors=True)


# With JSON logs (karpweb/logs.py), gunicorn's own lines are JSON too; an access line carries the
# request's method, path, status, duration and the X-Request-ID the response was given.
if (os.environ.get("KARPWEB_LOG_FORMAT") or "").strip().lower() == "json":
    logconfig_dict = {
        "formatters": {"generic": {"()": "karpweb.logs.JsonFormatter"}},
        "loggers": {
            # Django's root handler must not print these a second time.
            "gunicorn.error": {"level": loglevel.upper(), "handlers": ["error_console"], "propagate": False},
            "gunicorn.access": {
                "level": "INFO" if accesslog else "WARNING",
                "handlers": ["console"],
                "propagate": False,
            },
        },
    }
