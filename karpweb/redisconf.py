"""Redis behind Sentinel: one ``REDIS_URL`` for the broker, the locks, the batch window and
the cache, whether it names a Redis server or the Sentinels that know which server is master.

    REDIS_URL=redis://[:password@]host:6379/0                      a server (or a failover endpoint)
    REDIS_URL=sentinel://[:password@]host-a:26379,host-b:26379/0   Sentinels, with
    REDIS_SENTINEL_MASTER=mymaster                                 the name they monitor the master by

With Sentinels every client asks them for the master and asks again when its connection
fails, so a failover costs the commands in flight, not a restart: redis-py's Sentinel for
the locks, the batch window and the catalog; kombu's sentinel transport for Celery (its own
URL form, built here); and the cache through ``SentinelRedisCache``. The password, when
given, is the master's; the Sentinels are asked without one. Redis Cluster is not
supported: Celery's Redis transport does not speak it, and the batch window and the locks
use several keys in one command.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

import redis
from django.core.cache.backends.redis import RedisCache, RedisCacheClient
from django.core.exceptions import ImproperlyConfigured
from redis.sentinel import Sentinel


@dataclass(frozen=True)
class Sentinels:
    hosts: tuple[tuple[str, int], ...]
    master: str
    password: str | None
    db: int

    def broker_url(self) -> str:
        """kombu's form: one ``sentinel://`` URL per Sentinel, joined by ``;``."""
        auth = f":{self.password}@" if self.password else ""
        return ";".join(f"sentinel://{auth}{host}:{port}/{self.db}" for host, port in self.hosts)

    def master_client(self, timeout: float) -> redis.Redis:
        sentinel = Sentinel(list(self.hosts), socket_timeout=timeout, socket_connect_timeout=timeout)
        return sentinel.master_for(
            self.master,
            db=self.db,
            password=self.password,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
        )


def sentinels(url: str, master: str) -> Sentinels | None:
    """The Sentinels a ``sentinel://`` URL names; None for any other URL."""
    parts = urlsplit(url)
    if parts.scheme != "sentinel":
        return None
    if not master:
        raise ImproperlyConfigured("REDIS_URL names Sentinels: set REDIS_SENTINEL_MASTER to the master's name")
    hosts = []
    for item in parts.netloc.rpartition("@")[2].split(","):
        host, _, port = item.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ImproperlyConfigured(f"REDIS_URL: {item!r}: expected host:port of a Sentinel")
        hosts.append((host.strip("[]"), int(port)))
    path = parts.path.strip("/") or "0"
    if not path.isdigit():
        raise ImproperlyConfigured(f"REDIS_URL: database {path!r}: expected a number")
    password = unquote(parts.password) if parts.password else None
    return Sentinels(tuple(hosts), master, password, int(path))


def client(url: str, master: str, timeout: float) -> redis.Redis:
    """A client of the Redis ``url`` names (through its Sentinels when it names them)."""
    found = sentinels(url, master)
    if found is not None:
        return found.master_client(timeout)
    return redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)


class _SentinelCacheClient(RedisCacheClient):
    def __init__(self, servers: list[str], *, master: str, **options: Any) -> None:
        super().__init__(servers, **options)
        # One client for reads and writes: the master, found again after a failover.
        self._master = sentinels(servers[0], master).master_client(timeout=5)

    def get_client(self, key: Any = None, *, write: bool = False) -> redis.Redis:
        return self._master


class SentinelRedisCache(RedisCache):
    """Django's Redis cache on the master the Sentinels of LOCATION (a list of one
    ``sentinel://`` URL) name; OPTIONS carries ``master``."""

    def __init__(self, server: str, params: dict[str, Any]) -> None:
        super().__init__(server, params)
        self._class = _SentinelCacheClient
