#!/usr/bin/env python3
"""Fuzz the REST API against its own OpenAPI schema with schemathesis: no request may
cause a server error (5xx), and responses must match the schema's status codes.

    .venv/bin/python scripts/fuzz_api.py                  # 15 examples per operation, 4 minutes at most
    .venv/bin/python scripts/fuzz_api.py --max-examples 100 --max-time 1200

Serves karpweb with gunicorn on a fresh SQLite database (or DATABASE_URL's server, under a
database of its own) seeded with the seed's EC2NodeClass and NodePool and an editor whose
token the fuzzer uses, so writes are exercised too. Exit status: schemathesis's.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    from provisioning.launcher import free_port, wait_for_port

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-examples", type=int, default=15)
    parser.add_argument("--max-time", type=int, default=240, help="seconds for the whole run")
    args = parser.parse_args()

    var = Path(tempfile.mkdtemp(prefix="karpweb-fuzz-"))
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL",)}
    env.update(
        KARPWEB_VAR_DIR=str(var),
        DJANGO_SETTINGS_MODULE="karpweb.settings",
        KARPWEB_API_RATE="100000/minute",  # the fuzzer is one client sending thousands of requests
        PYTHONUNBUFFERED="1",
    )
    python = sys.executable
    setup = textwrap.dedent(
        """
        import django, yaml
        django.setup()
        from pathlib import Path
        from django.contrib.auth.models import Group, User
        from rest_framework.authtoken.models import Token
        from provisioning.services.policy import apply_manifest
        for name in ("ec2nodeclass.yaml", "nodepool.yaml"):
            apply_manifest(yaml.safe_load((Path("tests/fixtures/seed") / name).read_text()), source="cli")
        user = User.objects.create_user("fuzzer")
        user.groups.add(Group.objects.get(name="editor"))
        print(Token.objects.create(user=user).key)
        """
    )
    subprocess.run([python, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT, env=env, check=True)
    token = subprocess.run(
        [python, "-c", setup], cwd=ROOT, env=env, check=True, capture_output=True, text=True
    ).stdout.split()[-1]
    port = free_port()
    # The server logs every 404 and 400 the fuzzer provokes; they go to a file, shown only
    # when the run fails.
    server_log = (var / "server.log").open("w")
    server = subprocess.Popen(
        [str(Path(python).parent / "gunicorn"), "karpweb.wsgi", "-b", f"127.0.0.1:{port}", "-w", "2"]
        + ["--log-level", "warning"],
        cwd=ROOT,
        env=env,
        stdout=server_log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for_port(port, proc=server)
        base = f"http://127.0.0.1:{port}"
        command = [
            str(Path(python).parent / "schemathesis"),
            "run",
            f"{base}/api/schema/",
            "--url",
            base,
            "-H",
            f"Authorization: Token {token}",
            "--checks",
            "not_a_server_error,status_code_conformance,content_type_conformance",
            "--max-examples",
            str(args.max_examples),
            "--max-time",
            str(args.max_time),
            "--request-timeout",
            "30",
            "--seed",
            "1",
        ]
        try:
            # A bound of its own beyond --max-time: a fuzzer that hangs must fail CI, not stall it.
            status = subprocess.run(command, cwd=ROOT, env=env, timeout=args.max_time + 120).returncode
        except subprocess.TimeoutExpired:
            print(f"schemathesis did not finish within {args.max_time + 120} s", file=sys.stderr)
            status = 1
        if status:
            print(f"server log (last lines of {var / 'server.log'}):")
            print("".join((var / "server.log").read_text().splitlines(keepends=True)[-40:]))
        return status
    finally:
        server.terminate()
        server.wait(timeout=30)
        server_log.close()


if __name__ == "__main__":
    sys.exit(main())
