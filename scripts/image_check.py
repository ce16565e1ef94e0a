#!/usr/bin/env python3
"""Smoke check of the built image: each role started the way deploy/ runs it, with real processes.

    python3 scripts/image_check.py                      # karpweb:dev (make image-check)
    python3 scripts/image_check.py --image karpweb:0.1.0 --redis-url redis://127.0.0.1:6379/11

Every container runs as the pods do (deploy/base/pod-defaults.yaml): uid 10001, a read-only root
filesystem with writable /tmp and /var/lib/karpweb (tmpfs for the emptyDirs), no capabilities, no
privilege escalation, the ConfigMap's settings and the Secret's SECRET_KEY, DATABASE_URL and
REDIS_URL. Cluster and AWS stay simulated (the settings' defaults): there is no cluster here.
The containers share the host's network, so they reach PostgreSQL and Redis on 127.0.0.1.

In order, each step failing the check:
  * the image's user, size, and what a container may write (nothing but the two volumes);
  * a fresh scratch database (dropped first and at the end) and `migrate`, as the beat's init
    container runs it, then `await-migrations`, as the other init containers do;
  * `web`: /healthz, /readyz (database and Redis ok) and a static file, and the time it takes
    from `docker run` until /readyz answers 200;
  * `webhook`: certificates from `manage webhook_certs`, mounted read-only as the Secret is (root,
    group 10001, 0440); TLS verified against their CA under the Service's name; an AdmissionReview
    of a valid NodePool allowed and one of an invalid NodePool denied; both counted on the metrics
    port (KARPWEB_METRICS_PORT, served by gunicorn's master), and no /metrics on the webhook's port;
  * `worker` and `beat`: their liveness probe (`alive`) passes, as the kubelet runs it;
  * each container stops on SIGTERM (`docker stop`) with status 0 within its Deployment's
    terminationGracePeriodSeconds.
Containers, the certificate volume, the scratch database and the Redis database are removed at
the end, whatever happened. Exit status 0 when every step passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import secrets
import shlex
import signal
import socket
import ssl
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
UID = 10001
# terminationGracePeriodSeconds of each Deployment (deploy/base); the beat's is Kubernetes' default.
GRACE = {"web": 30, "webhook": 15, "worker": 60, "beat": 30}
WEBHOOK_HOST = "karpweb-webhook.karpweb.svc"  # the name the API server calls (and verifies)
CERTS = "/etc/karpweb/webhook-tls"
HTMX = "vendor/htmx-2.0.11.min.js"
# The startup probes' budgets: periodSeconds x failureThreshold, of web and webhook (2 x 30) and of
# worker and beat (5 x 24).
STARTUP = 60
LOOPING_STARTUP = 120
# Nothing below may block longer than this in all.
OVERALL_TIMEOUT = 900


class CheckFailed(Exception):
    pass


def step(message: str) -> None:
    print(f"image-check: {message}", flush=True)


class Docker:
    """The docker CLI, every call bounded in time; remembers what it started, to remove it."""

    def __init__(self, docker: str, image: str, network: str, env: dict[str, str]) -> None:
        self.docker = docker
        self.image = image
        self.network = network
        self.env = env
        self.run_id = f"karpweb-check-{os.getpid()}"
        self.containers: list[str] = []
        self.volumes: list[str] = []
        self.made_database = False
        self.phase = "the engine"

    def __call__(self, *args: str, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess:
        argv = [self.docker, *args]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            raise CheckFailed(f"timed out after {timeout:g} s: {shlex.join(argv[:8])} ...") from None
        if check and done.returncode != 0:
            raise CheckFailed(f"{shlex.join(argv[:8])} ... exited {done.returncode}:\n{done.stdout}{done.stderr}")
        return done

    def pod_args(self, *, user: str | None = f"{UID}:{UID}", extra_env: dict[str, str] | None = None) -> list[str]:
        """What pod-defaults.yaml gives every karpweb container (runAsUser/runAsGroup: ``user``;
        None leaves the image's own USER)."""
        args = [
            "--pull=never",
            f"--network={self.network}",
            *([f"--user={user}"] if user else []),
            "--read-only",
            "--cap-drop=ALL",
            "--security-opt=no-new-privileges",
            # The emptyDirs, writable by the pod's fsGroup (10001).
            "--tmpfs=/tmp:rw,size=64m,mode=1777",
            f"--tmpfs=/var/lib/karpweb:rw,size=64m,uid={UID},gid={UID},mode=0750",
            f"--label=karpweb-image-check={self.run_id}",
        ]
        args += [f"--env={name}={value}" for name, value in {**self.env, **(extra_env or {})}.items()]
        return args

    def run(self, *args: str, timeout: float = 120, **pod) -> subprocess.CompletedProcess:
        """A one-off container, removed when done; fails the check on a non-zero status."""
        name = f"{self.run_id}-{len(self.containers)}"
        self.containers.append(name)
        return self("run", "--rm", "--name", name, *self.pod_args(**pod), *args, timeout=timeout)

    def start(self, role: str, *args: str, **pod) -> str:
        name = f"{self.run_id}-{role}"
        self.containers.append(name)
        self("run", "--detach", "--name", name, *self.pod_args(**pod), *args, self.image, role)
        return name

    def logs(self, name: str, lines: int = 60) -> str:
        done = self("logs", "--tail", str(lines), name, timeout=20, check=False)
        return (done.stdout + done.stderr).strip()

    def state(self, name: str) -> dict:
        done = self("inspect", "--format", "{{json .State}}", name, timeout=20)
        return json.loads(done.stdout)

    def cleanup(self) -> None:
        for name in self.containers:
            self("rm", "--force", "--volumes", name, timeout=60, check=False)
        for volume in self.volumes:
            self("volume", "rm", "--force", volume, timeout=60, check=False)


def wait_until(what: str, ready, timeout: float, container: tuple[Docker, str] | None = None) -> float:
    """Poll ``ready`` until it is true; the seconds it took. Fails if ``container`` exits first."""
    start = time.monotonic()
    last = None
    while time.monotonic() - start < timeout:
        try:
            if ready():
                return time.monotonic() - start
        except (OSError, http.client.HTTPException, ValueError) as exc:
            last = exc
        if container is not None:
            docker, name = container
            state = docker.state(name)
            if not state["Running"]:
                raise CheckFailed(f"{name} exited with status {state['ExitCode']} before {what}:\n{docker.logs(name)}")
        time.sleep(0.25)
    detail = f" (last error: {last})" if last else ""
    logs = f"\n{container[0].logs(container[1])}" if container else ""
    raise CheckFailed(f"timed out after {timeout:g} s waiting for {what}{detail}{logs}")


def http_get(port: int, path: str, *, context: ssl.SSLContext | None = None, host: str = "localhost", headers=None):
    """(status, headers, body) of a GET to 127.0.0.1:port, with the Host header the probes send."""
    conn = connect(port, context, host)
    try:
        conn.request("GET", path, headers={"Host": host, **(headers or {})})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


class _VerifiedHTTPSConnection(http.client.HTTPSConnection):
    """Connects to 127.0.0.1 but verifies the certificate for ``server_name``, as the API server
    verifies the webhook's certificate for the Service's DNS name."""

    def __init__(self, port: int, context: ssl.SSLContext, server_name: str) -> None:
        super().__init__("127.0.0.1", port, timeout=5, context=context)
        self.server_name = server_name
        self.tls_context = context

    def connect(self) -> None:
        sock = socket.create_connection(("127.0.0.1", self.port), self.timeout)
        self.sock = self.tls_context.wrap_socket(sock, server_hostname=self.server_name)


def connect(port: int, context: ssl.SSLContext | None, host: str):
    if context is None:
        return http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    return _VerifiedHTTPSConnection(port, context, host)


def free_port(preferred: int) -> int:
    """``preferred`` (the image's default) when nothing on this host listens there, else any free port."""
    for candidate in (preferred, 0):
        with socket.socket() as sock:
            try:
                sock.bind(("0.0.0.0", candidate))
            except OSError:
                continue
            return sock.getsockname()[1]
    raise CheckFailed("no free port")


def admission_review(obj: dict) -> dict:
    group, _, version = obj["apiVersion"].partition("/")
    gvk = {"group": group, "version": version, "kind": obj["kind"]}
    gvr = {"group": group, "version": version, "resource": "nodepools"}
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": gvk,
            "resource": gvr,
            "requestKind": gvk,
            "requestResource": gvr,
            "name": obj["metadata"]["name"],
            "operation": "CREATE",
            "userInfo": {"username": "kubernetes-admin", "groups": ["system:authenticated"]},
            "object": obj,
            "oldObject": None,
            "dryRun": False,
        },
    }


def nodepool(*, valid: bool) -> dict:
    requirements = [
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
    ]
    spec: dict = {
        "template": {
            "spec": {
                "requirements": requirements,
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            }
        },
        "limits": {"cpu": 100},
    }
    if not valid:
        requirements[0]["operator"] = "Sometimes"
        spec["weight"] = 500
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "image-check"}, "spec": spec}


def review(port: int, context: ssl.SSLContext, obj: dict) -> dict:
    body = admission_review(obj)
    conn = connect(port, context, WEBHOOK_HOST)
    try:
        conn.request(
            "POST",
            "/webhook/validate?timeout=5s",
            body=json.dumps(body).encode(),
            headers={"Host": WEBHOOK_HOST, "Content-Type": "application/json"},
        )
        response = conn.getresponse()
        payload = response.read()
    finally:
        conn.close()
    if response.status != 200:
        raise CheckFailed(f"the webhook answered {response.status}: {payload[:500]!r}")
    answer = json.loads(payload)["response"]
    if answer["uid"] != body["request"]["uid"]:
        raise CheckFailed(f"the review's answer has uid {answer['uid']}, not the request's")
    return answer


_REVIEW_COUNT = re.compile(r"^karpweb_webhook_request_duration_seconds_count\{([^}]*)\} (\S+)$", re.MULTILINE)


def review_counts(metrics_port: int) -> dict[tuple[str, str, str], float]:
    """{(kind, operation, result): reviews} as the webhook's metrics port reports them."""
    status, _, body = http_get(metrics_port, "/metrics")
    if status != 200:
        raise CheckFailed(f"the webhook's metrics port answered {status}: {body[:300]!r}")
    counts = {}
    for labels, value in _REVIEW_COUNT.findall(body.decode()):
        named = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        counts[(named.get("kind", ""), named.get("operation", ""), named.get("result", ""))] = float(value)
    return counts


def stop(docker: Docker, name: str, role: str) -> float:
    """docker stop (SIGTERM, SIGKILL after the grace period): must exit 0, and in time."""
    grace = GRACE[role]
    started = time.monotonic()
    docker("stop", "--time", str(grace), name, timeout=grace + 30)
    took = time.monotonic() - started
    state = docker.state(name)
    if state["ExitCode"] != 0 or state.get("OOMKilled"):
        raise CheckFailed(
            f"{role} exited with status {state['ExitCode']} on SIGTERM (137: killed after the "
            f"{grace} s grace period):\n{docker.logs(name)}"
        )
    step(f"{role} stopped on SIGTERM with status 0 in {took:.1f} s (grace {grace} s)")
    return took


def scratch_database(docker: Docker, database_url: str, redis_url: str, *, create: bool) -> None:
    """Drop (and create) the check's own database, and empty its Redis database, from the image."""
    parts = urlsplit(database_url)
    name = parts.path.lstrip("/")
    admin_url = urlunsplit(parts._replace(path="/postgres"))
    code = "\n".join(
        [
            "import sys, psycopg, redis",
            "name, admin, redis_url, create = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == '1'",
            "with psycopg.connect(admin, autocommit=True, connect_timeout=10) as db:",
            "    db.execute(f'DROP DATABASE IF EXISTS {name} WITH (FORCE)')",
            "    if create:",
            "        db.execute(f'CREATE DATABASE {name}')",
            "redis.Redis.from_url(redis_url, socket_timeout=10).flushdb()",
        ]
    )
    docker.run("--entrypoint", "python", docker.image, "-c", code, name, admin_url, redis_url, "1" if create else "0")


def check(docker: Docker, options) -> None:
    image = docker.image
    docker.phase = "the image"

    # -- the image: its user, its size, and a read-only root filesystem
    config = json.loads(docker("image", "inspect", "--format", "{{json .}}", image).stdout)
    size_mb = config["Size"] / 1e6
    if config["Config"]["User"] != f"{UID}:{UID}":
        raise CheckFailed(f"the image runs as {config['Config']['User']!r}, not {UID}:{UID}")
    probe = "\n".join(
        [
            "import os, sys",
            "print(os.getuid(), os.getgid())",
            "for path in ('/', '/app', '/app/staticfiles', '/opt/venv', '/etc'):",
            "    try:",
            "        open(os.path.join(path, 'probe'), 'w').close()",
            "    except OSError as exc:",
            "        assert exc.errno == 30, (path, exc)  # EROFS",
            "    else:",
            "        sys.exit(f'{path} is writable')",
            "for path in ('/var/lib/karpweb', '/tmp'):",
            "    with open(os.path.join(path, 'probe'), 'w') as f:",
            "        f.write('ok')",
            f"assert os.path.isfile('/app/staticfiles/{HTMX}'), 'no collected static files'",
        ]
    )
    done = docker.run("--entrypoint", "python", image, "-c", probe, user=None)
    if done.stdout.split() != [str(UID), str(UID)]:
        raise CheckFailed(f"a container of the image runs as uid/gid {done.stdout.strip()}, not {UID}")
    step(f"{image}: {size_mb:.0f} MB; runs as {UID}:{UID}; only /tmp and /var/lib/karpweb are writable")

    # -- the schema: migrate, as the beat's init container; await-migrations, as the others'
    docker.phase = "migrate"
    docker.made_database = True
    scratch_database(docker, options.database_url, options.redis_url, create=True)
    started = time.monotonic()
    docker.run(image, "migrate", timeout=300)
    step(f"migrate applied the schema to a fresh database in {time.monotonic() - started:.1f} s")
    done = docker.run(image, "await-migrations", "--timeout", "0")
    if "schema is current" not in done.stdout:
        raise CheckFailed(f"await-migrations after migrate: {done.stdout}{done.stderr}")
    step("await-migrations: the database schema is current")

    # -- web
    docker.phase = "web"
    port = free_port(8000)
    env = {"WEB_CONCURRENCY": "2", **({"PORT": str(port)} if port != 8000 else {})}
    started = time.monotonic()
    web = docker.start("web", extra_env=env)
    wait_until("web's /readyz to answer 200", lambda: http_get(port, "/readyz")[0] == 200, STARTUP, (docker, web))
    ready_in = time.monotonic() - started
    status, _, body = http_get(port, "/healthz")
    if status != 200 or json.loads(body) != {"status": "ok"}:
        raise CheckFailed(f"web /healthz: {status} {body[:300]!r}")
    status, _, body = http_get(port, "/readyz")
    if json.loads(body)["checks"] != {"database": "ok", "redis": "ok"}:
        raise CheckFailed(f"web /readyz: {status} {body[:300]!r}")
    # As through the TLS ingress, which says so in X-Forwarded-Proto (production redirects plain HTTP).
    status, headers, body = http_get(port, f"/static/{HTMX}", headers={"X-Forwarded-Proto": "https"})
    if status != 200 or body != (ROOT / "static" / HTMX).read_bytes():
        raise CheckFailed(f"web /static/{HTMX}: {status}, {len(body)} bytes, not the vendored file")
    kind = headers.get("Content-Type", "")
    if "javascript" not in kind:
        raise CheckFailed(f"web /static/{HTMX} is served as {kind!r}")
    step(f"web on :{port}: /readyz 200 {ready_in:.1f} s after docker run; /healthz 200; /static/{HTMX} 200")

    # -- webhook, with certificates mounted as the Secret karpweb-webhook-tls is
    docker.phase = "webhook"
    volume = f"{docker.run_id}-webhook-tls"
    docker("volume", "create", volume)
    docker.volumes.append(volume)
    make_certs = (
        "python manage.py webhook_certs --out /out -v 0"
        f" && chown 0:{UID} /out/tls.crt /out/tls.key && chmod 0440 /out/tls.crt /out/tls.key"
        " && cat /out/ca.crt && rm /out/ca.key"
    )
    # As root, on no network, apart from the pods: the kubelet, not the pod, owns a Secret's files.
    done = docker(
        "run",
        "--rm",
        "--pull=never",
        "--network=none",
        "--user=0:0",
        f"--label=karpweb-image-check={docker.run_id}",
        f"--env=SECRET_KEY={docker.env['SECRET_KEY']}",
        f"--volume={volume}:/out",
        "--entrypoint=sh",
        image,
        "-c",
        make_certs,
    )
    ca_pem = done.stdout
    context = ssl.create_default_context(cadata=ca_pem)
    port, metrics_port = free_port(8443), free_port(9100)
    env = {
        "ALLOWED_HOSTS": f"{WEBHOOK_HOST},localhost",
        "WEBHOOK_CERT_FILE": f"{CERTS}/tls.crt",
        "WEBHOOK_KEY_FILE": f"{CERTS}/tls.key",
        "KARPWEB_METRICS_PORT": str(metrics_port),
        **({"WEBHOOK_PORT": str(port)} if port != 8443 else {}),
    }
    webhook = docker.start("webhook", "--volume", f"{volume}:{CERTS}:ro", extra_env=env)
    wait_until(
        "webhook's /readyz to answer 200 over TLS",
        lambda: http_get(port, "/readyz", context=context, host=WEBHOOK_HOST)[0] == 200,
        STARTUP,
        (docker, webhook),
    )
    allowed = review(port, context, nodepool(valid=True))
    if allowed["allowed"] is not True:
        raise CheckFailed(f"a valid NodePool was denied: {allowed}")
    denied = review(port, context, nodepool(valid=False))
    message = denied.get("status", {}).get("message", "")
    if denied["allowed"] is not False or denied["status"].get("code") != 422 or "Sometimes" not in message:
        raise CheckFailed(f"an invalid NodePool was not denied for its operator: {denied}")
    step(f"webhook on :{port} (TLS, verified as {WEBHOOK_HOST}): valid NodePool allowed, invalid one denied (422)")
    counts = review_counts(metrics_port)
    if counts != {("NodePool", "CREATE", "allowed"): 1.0, ("NodePool", "CREATE", "denied"): 1.0}:
        raise CheckFailed(f"the webhook's metrics port counted {counts}, not the two reviews")
    status = http_get(port, "/metrics", context=context, host=WEBHOOK_HOST)[0]
    if status != 404:
        raise CheckFailed(f"the webhook's port answered {status} to /metrics, which it must not serve")
    step(f"webhook metrics on :{metrics_port} (gunicorn's master): both reviews counted; :{port}/metrics 404")

    # -- worker and beat, probed as the kubelet probes them
    looping = {}
    for role, max_age in (("worker", 60), ("beat", 90)):
        extra: list[str] = []
        env = {}
        if role == "worker":
            env = {
                "WORKER_CONCURRENCY": "2",
                "KARPWEB_METRICS_PORT": str(free_port(9100)),
                "PROMETHEUS_MULTIPROC_DIR": "/var/run/karpweb-metrics",
            }
            extra = ["--tmpfs", f"/var/run/karpweb-metrics:rw,size=32m,uid={UID},gid={UID},mode=0750"]
        docker.phase = role
        name = docker.start(role, *extra, extra_env=env)
        probe = ("exec", name, "python", "-m", "karpweb.entrypoint", "alive", "--max-age", str(max_age))
        took = wait_until(
            f"{role}'s liveness probe (alive) to pass",
            lambda probe=probe: docker(*probe, timeout=10, check=False).returncode == 0,
            LOOPING_STARTUP,
            (docker, name),
        )
        looping[role] = name
        step(f"{role}: alive after {took:.1f} s")
    # Both still alive a heartbeat later (the worker's every 2 s, the beat's every tick).
    time.sleep(3)
    for role, name in looping.items():
        if not docker.state(name)["Running"]:
            raise CheckFailed(f"{role} exited:\n{docker.logs(name)}")

    # -- every role stops on SIGTERM within its grace period
    for role, name in (("web", web), ("webhook", webhook), *looping.items()):
        docker.phase = f"stopping {role}"
        stop(docker, name, role)

    step(f"passed: image {image}, {size_mb:.0f} MB; web ready {ready_in:.1f} s after docker run")


def main() -> int:
    cli = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    cli.add_argument("--image", default="karpweb:dev")
    cli.add_argument("--docker", default=os.environ.get("DOCKER") or "docker", help="the docker CLI")
    cli.add_argument(
        "--database-url",
        default="postgres://postgres@127.0.0.1:5432/karpweb_image",
        help="a PostgreSQL database of the check's own: dropped and created afresh, dropped at the end",
    )
    cli.add_argument(
        "--redis-url",
        default="redis://127.0.0.1:6379/11",
        help="a Redis database of the check's own (not 0): emptied at the start and the end",
    )
    cli.add_argument("--network", default="host", help="the containers' network: it must reach both")
    options = cli.parse_args()

    database = urlsplit(options.database_url).path.lstrip("/")
    if not re.fullmatch(r"[a-z_][a-z0-9_]*", database) or database in {"postgres", "template0", "template1"}:
        cli.error(f"--database-url: {database!r} is not a scratch database name")
    if urlsplit(options.redis_url).path.strip("/") in {"", "0"}:
        cli.error("--redis-url: give a Redis database number of the check's own, not 0")

    env = {
        # The ConfigMap karpweb-config (deploy/base/kustomization.yaml), cluster and AWS left simulated.
        "KARPWEB_PRODUCTION": "true",
        "LOG_LEVEL": "INFO",
        "KARPWEB_LOG_FORMAT": "json",
        "ALLOWED_HOSTS": "localhost",
        # The Secret karpweb-env.
        "SECRET_KEY": secrets.token_urlsafe(50),
        "KARPWEB_METRICS_TOKEN": secrets.token_urlsafe(32),
        "DATABASE_URL": options.database_url,
        "REDIS_URL": options.redis_url,
    }
    docker = Docker(options.docker, options.image, options.network, env)

    def give_up(signum, frame):
        raise CheckFailed(
            f"stopped by signal {signum}"
            if signum != signal.SIGALRM
            else f"the whole check took more than {OVERALL_TIMEOUT} s"
        )

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM):
        signal.signal(sig, give_up)
    signal.alarm(OVERALL_TIMEOUT)
    failed = None
    try:
        docker("version", "--format", "{{.Server.Version}}", timeout=20)
        check(docker, options)
    except CheckFailed as exc:
        failed = f"{docker.phase}: {exc}"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        docker.cleanup()
        if docker.made_database:
            try:
                scratch_database(docker, options.database_url, options.redis_url, create=False)
            except CheckFailed as exc:
                print(f"image-check: could not drop the scratch database: {exc}", file=sys.stderr)
            docker.cleanup()
    if failed:
        print(f"image-check: FAILED: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
