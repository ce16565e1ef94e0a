"""bench/interruption.py at a small scale, as a user runs it: 10 interrupted spot nodes are
replaced with no pod lost, and a queue of mixed messages is drained, with and without the
consumer killed midway, every message handled and deleted. (Times are printed, never
asserted.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_the_interruption_bench_runs_and_loses_nothing():
    # Its own SQLite file and embedded Redis: the bench flushes the database it is given.
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    done = subprocess.run(
        [sys.executable, "bench/interruption.py", "--messages", "60", "--skip-termination", "--timeout", "240"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr[-3000:]
    assert "warning to the replacements' CreateFleet: first +" in out
    assert "warning to every pod running again on new nodes:" in out
    assert "reference, same run: 200 pending pods provisioned from scratch" in out
    assert "60 handled, 60 deleted, 0 left in the queue" in out
    assert "60 of 60 handled, 60 deleted" in out
