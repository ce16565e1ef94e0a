"""The unavailable-offerings (insufficient capacity) cache, against a real Redis."""

from __future__ import annotations

import time
import uuid

import pytest
import redis as redis_lib

from provisioning.cloud import ice


@pytest.fixture
def redis(redis_url):
    client = redis_lib.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
def prefix(redis):
    """A key prefix of this test's own, removed afterwards."""
    value = f"karpweb:test:{uuid.uuid4().hex}:ice:"
    yield value
    for key in redis.scan_iter(match=value + "*"):
        redis.delete(key)


def test_mark_then_read_back(redis, prefix):
    assert ice.unavailable_keys(redis, prefix=prefix) == set()
    key = ice.mark_unavailable(redis, "spot", "m5.large", "us-east-1a", "InsufficientInstanceCapacity", prefix=prefix)
    assert key == "spot:m5.large:us-east-1a"
    ice.mark_unavailable(redis, "on-demand", "c6i.xlarge", "us-east-1b", "InsufficientInstanceCapacity", prefix=prefix)
    assert ice.unavailable_keys(redis, prefix=prefix) == {"spot:m5.large:us-east-1a", "on-demand:c6i.xlarge:us-east-1b"}
    assert ice.is_unavailable(redis, "spot", "m5.large", "us-east-1a", prefix=prefix)
    assert not ice.is_unavailable(redis, "on-demand", "m5.large", "us-east-1a", prefix=prefix)
    assert not ice.is_unavailable(redis, "spot", "m5.large", "us-east-1b", prefix=prefix)
    assert redis.get(prefix + "spot:m5.large:us-east-1a") == b"InsufficientInstanceCapacity"


def test_the_default_key_layout_and_ttl(redis):
    zone = f"test-zone-{uuid.uuid4().hex[:8]}"
    try:
        ice.mark_unavailable(redis, "spot", "m5.large", zone, "InsufficientInstanceCapacity")
        name = f"karpweb:ice:spot:m5.large:{zone}"
        assert 170 <= redis.ttl(name) <= 180
        assert f"spot:m5.large:{zone}" in ice.unavailable_keys(redis)
        assert ice.is_unavailable(redis, "spot", "m5.large", zone)
    finally:
        ice.clear(redis, "spot", "m5.large", zone)
    assert not ice.is_unavailable(redis, "spot", "m5.large", zone)


def test_marks_expire(redis, prefix):
    ice.mark_unavailable(redis, "spot", "m5.large", "us-east-1a", "ICE", ttl=1, prefix=prefix)
    assert ice.is_unavailable(redis, "spot", "m5.large", "us-east-1a", prefix=prefix)
    deadline = time.monotonic() + 5
    while ice.is_unavailable(redis, "spot", "m5.large", "us-east-1a", prefix=prefix):
        assert time.monotonic() < deadline, "the mark outlived its TTL"
        time.sleep(0.1)
    assert ice.unavailable_keys(redis, prefix=prefix) == set()


def test_marking_again_extends_the_ttl(redis, prefix):
    ice.mark_unavailable(redis, "spot", "m5.large", "us-east-1a", "first", ttl=5, prefix=prefix)
    assert redis.ttl(prefix + "spot:m5.large:us-east-1a") <= 5
    ice.mark_unavailable(redis, "spot", "m5.large", "us-east-1a", "again", ttl=180, prefix=prefix)
    assert redis.ttl(prefix + "spot:m5.large:us-east-1a") > 170
    assert redis.get(prefix + "spot:m5.large:us-east-1a") == b"again"


def test_scan_finds_every_mark_across_pages(redis, prefix):
    zones = [f"zone-{i}" for i in range(2500)]
    pipe = redis.pipeline()
    for zone in zones:
        pipe.set(prefix + f"spot:m5.large:{zone}", "ICE", ex=60)
    pipe.execute()
    assert ice.unavailable_keys(redis, prefix=prefix) == {f"spot:m5.large:{zone}" for zone in zones}


def test_reasons_and_end_times_for_explanations(redis, prefix):
    ice.mark_unavailable(redis, "spot", "m5.large", "us-east-1a", "InsufficientInstanceCapacity", prefix=prefix)
    now = time.time()
    marks = ice.unavailable_offerings(redis, prefix=prefix, now=now)
    assert list(marks) == ["spot:m5.large:us-east-1a"]
    assert marks["spot:m5.large:us-east-1a"]["reason"] == "InsufficientInstanceCapacity"
    assert now + 170 < marks["spot:m5.large:us-east-1a"]["until"] <= now + 180


def test_checker_answers_catalog_keys(redis, prefix):
    ice.mark_unavailable(redis, "on-demand", "m5.large", "us-east-1c", "ICE", prefix=prefix)
    unavailable = ice.checker(redis, prefix=prefix)
    assert unavailable("on-demand:m5.large:us-east-1c")
    assert not unavailable("spot:m5.large:us-east-1c")


def test_prefixes_with_glob_characters_match_literally(redis, prefix):
    odd = prefix + "[x]*?:"
    try:
        ice.mark_unavailable(redis, "spot", "m5.large", "us-east-1a", "ICE", prefix=odd)
        ice.mark_unavailable(redis, "spot", "m5.large", "us-east-1b", "ICE", prefix=prefix + "x:")
        assert ice.unavailable_keys(redis, prefix=odd) == {"spot:m5.large:us-east-1a"}
    finally:
        redis.delete(odd + "spot:m5.large:us-east-1a")
