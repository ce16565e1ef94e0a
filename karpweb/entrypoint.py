"""The image's entrypoint: one image, one process per role.

    python -m karpweb.entrypoint web | webhook | worker | beat | watch | interruptions
    python -m karpweb.entrypoint migrate | await-migrations [--timeout S] | alive [--max-age S]
    python -m karpweb.entrypoint manage COMMAND [ARGS...]

The serving roles replace this process (exec) with the same command lines ``make run`` uses
(``provisioning.launcher``), so the server itself is PID 1 and receives the container's SIGTERM.
Django is not set up here, except for ``await-migrations``: a bad setting is reported by the
process that reads it.

Environment, beyond what karpweb.settings and deploy/gunicorn.conf.py read:
    WORKER_CONCURRENCY      Celery worker processes (4)
    WORKER_QUEUES           comma-separated queues the worker consumes (all)
    LOG_LEVEL               Celery's log level (INFO)
    KARPWEB_HEARTBEAT_FILE  liveness file of worker, beat, watch and interruptions (<var>/heartbeat)
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import NoReturn

from karpweb import heartbeat
from provisioning.launcher import REPO_DIR, celery_beat_argv, celery_worker_argv, gunicorn_argv

MANAGE = [sys.executable, str(REPO_DIR / "manage.py")]
# The roles whose liveness is a heartbeat file rather than an HTTP probe.
LOOPING = {"worker", "beat", "watch", "interruptions"}


def var_dir() -> Path:
    """As karpweb.settings reads it, without setting Django up."""
    return Path(os.environ.get("KARPWEB_VAR_DIR") or REPO_DIR / "var")


def heartbeat_file() -> Path:
    return Path(os.environ.get(heartbeat.ENV) or var_dir() / "heartbeat")


def argv_for(role: str, args: list[str]) -> list[str]:
    loglevel = os.environ.get("LOG_LEVEL") or "INFO"
    if role in ("web", "webhook"):
        return gunicorn_argv()
    if role == "worker":
        concurrency = (os.environ.get("WORKER_CONCURRENCY") or "4").strip()
        if not concurrency.isdigit() or int(concurrency) < 1:
            sys.exit(f"WORKER_CONCURRENCY={concurrency!r}: expected a positive integer")
        queues = os.environ.get("WORKER_QUEUES", "").strip()
        return celery_worker_argv(concurrency=int(concurrency), queues=queues, loglevel=loglevel)
    if role == "beat":
        return celery_beat_argv(var_dir() / "celerybeat-schedule", loglevel=loglevel)
    if role == "watch":
        return [*MANAGE, "cluster_watch"]
    if role == "interruptions":
        return [*MANAGE, "interruptions", "--wait-without-queue"]
    if role == "migrate":
        return [*MANAGE, "migrate", "--noinput"]
    if role == "manage":
        return [*MANAGE, *args]
    raise ValueError(role)


def run(role: str, args: list[str]) -> NoReturn:
    """Replace this process with the role's."""
    env = dict(os.environ)
    if role in ("web", "webhook"):
        env["KARPWEB_ROLE"] = role
    if role in LOOPING:
        env[heartbeat.ENV] = str(heartbeat_file())
        # Where the heartbeat and the beat's schedule file are written.
        for directory in {var_dir(), heartbeat_file().parent}:
            directory.mkdir(parents=True, exist_ok=True)
    argv = argv_for(role, args)
    os.chdir(REPO_DIR)  # manage.py and "karpweb.wsgi" import from here
    os.execve(argv[0], argv, env)


def alive(max_age: float) -> int:
    """The liveness probe of worker, beat and watch: is the heartbeat recent enough?"""
    path = heartbeat_file()
    seconds = heartbeat.age(path)
    if seconds is None:
        print(f"no heartbeat yet: {path} does not exist", file=sys.stderr)
        return 1
    if seconds > max_age:
        print(f"heartbeat {path} is {seconds:.0f} s old (limit {max_age:g} s)", file=sys.stderr)
        return 1
    return 0


def await_migrations(timeout: float) -> int:
    """Wait until the database has every migration this code ships (the beat's init container
    applies them, once per rollout); the other roles' init containers run this, so no pod of a
    new version serves from an old schema."""
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "karpweb.settings")
    django.setup()
    from django.db import DatabaseError, connection
    from django.db.migrations.executor import MigrationExecutor

    deadline = time.monotonic() + timeout
    while True:
        try:
            executor = MigrationExecutor(connection)
            pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
            waiting_for = f"{len(pending)} migrations to be applied" if pending else ""
        except DatabaseError as exc:
            waiting_for = f"the database ({exc.__class__.__name__}: {str(exc).strip()})"
        finally:
            connection.close()
        if not waiting_for:
            print("the database schema is current")
            return 0
        if time.monotonic() >= deadline:
            print(f"gave up after {timeout:g} s waiting for {waiting_for}", file=sys.stderr)
            return 1
        print(f"waiting for {waiting_for}", flush=True)
        time.sleep(5)


def parser() -> argparse.ArgumentParser:
    cli = argparse.ArgumentParser(prog="python -m karpweb.entrypoint", description=__doc__.split("\n")[0])
    roles = cli.add_subparsers(dest="role", required=True, metavar="ROLE")
    for role, help_text in (
        ("web", "the dashboard and REST API: gunicorn on $PORT (8000)"),
        ("webhook", "the admission webhook: gunicorn with TLS on $WEBHOOK_PORT (8443)"),
        ("worker", "a Celery worker"),
        ("beat", "the Celery beat (run exactly one)"),
        ("watch", "manage.py cluster_watch (run exactly one)"),
        ("interruptions", "manage.py interruptions: the interruption queue's consumer (replicas elect one)"),
        ("migrate", "manage.py migrate"),
    ):
        roles.add_parser(role, help=help_text)
    manage = roles.add_parser("manage", help="any manage.py command")
    manage.add_argument("args", nargs=argparse.REMAINDER)
    waiting = roles.add_parser("await-migrations", help="wait until the schema is current")
    waiting.add_argument("--timeout", type=float, default=600.0, help="give up after this many seconds (600)")
    probe = roles.add_parser("alive", help="liveness probe of worker, beat and watch")
    probe.add_argument("--max-age", type=float, default=60.0, help="oldest acceptable heartbeat in seconds (60)")
    return cli


def main(argv: list[str] | None = None) -> int:
    options = parser().parse_args(argv)

    if options.role == "alive":
        return alive(options.max_age)
    if options.role == "await-migrations":
        return await_migrations(options.timeout)
    run(options.role, getattr(options, "args", []))


if __name__ == "__main__":
    sys.exit(main())
