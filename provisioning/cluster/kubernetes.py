"""The ``Cluster`` protocol over a real API server, through the official ``kubernetes`` client
(the only module that imports it).

Objects cross as plain manifests: every call asks the client for the raw response
(``_preload_content=False``) and decodes the JSON itself, so callers see camelCase keys
exactly as ``kubectl get -o json`` shows them, never the client's generated model classes.
Every failure becomes a :class:`ClusterError` naming the verb, the kind and the object, with
the API server's own message; ``retryable`` says whether trying again may help.

Watching follows the informer recipe: list, announce every listed object as ADDED, watch from
the list's resourceVersion, and list again when the server says that version is gone (410).

Events (core v1) are de-duplicated and sent by a background thread (:class:`EventOutbox`), so
the services record them without waiting on the API server. Leases (coordination.k8s.io/v1)
are read and written here for ``leaderelection``.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Collection, Hashable, Iterable, Iterator
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any

import urllib3
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from provisioning import crd
from provisioning.cluster.base import ClusterError, Conflict, Event, Eviction, Manifest, ObjectEvent

log = logging.getLogger(__name__)

DEFAULT_KUBECONFIG = "~/.kube/config"
CONNECT_TIMEOUT = 10.0
# A taint is added with a read-modify-write guarded by resourceVersion; the kubelet and
# other controllers update nodes often, so a few conflicts in a row are normal.
TAINT_ATTEMPTS = 5
# Metadata the API server owns. A write carrying them is refused (a uid from our database
# never matches the cluster's) or ignored, so they are dropped; resourceVersion stays, it is
# the precondition that keeps a replace from overwriting someone else's change.
SERVER_OWNED_METADATA = (
    "uid",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
)


@dataclass(frozen=True)
class Resource:
    """Where a kind lives in the API."""

    kind: str
    group: str  # "" for the core group
    version: str
    plural: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


POD = Resource("Pod", "", "v1", "pods")
NODE = Resource("Node", "", "v1", "nodes")
DAEMONSET = Resource("DaemonSet", "apps", "v1", "daemonsets")
PDB = Resource("PodDisruptionBudget", "policy", "v1", "poddisruptionbudgets")
NODECLAIM = Resource("NodeClaim", "karpenter.sh", "v1", "nodeclaims")
LEASE = Resource("Lease", "coordination.k8s.io", "v1", "leases")
# NodePool and EC2NodeClass are described once, in provisioning.crd.
CUSTOM = {k.kind: Resource(k.kind, k.group, k.version, k.plural) for k in crd.KINDS.values()}
WATCHABLE = {r.kind: r for r in (POD, NODE, *CUSTOM.values())}

# What the calls in this module need from RBAC, as (API group, resource) -> verbs; watching is
# the list call with watch=True. deploy/base/rbac.yaml grants exactly this, and
# tests/test_deploy.py checks both that and that every client call below is accounted for here.
POLICY_VERBS = frozenset({"get", "list", "watch", "create", "update", "delete"})
API_ACCESS: dict[tuple[str, str], frozenset[str]] = {
    ("", "pods"): frozenset({"list", "watch", "delete"}),
    ("", "pods/eviction"): frozenset({"create"}),
    ("", "nodes"): frozenset({"get", "list", "watch", "patch", "delete"}),
    ("apps", "daemonsets"): frozenset({"list"}),
    ("policy", "poddisruptionbudgets"): frozenset({"list"}),
    (NODECLAIM.group, NODECLAIM.plural): frozenset({"create", "delete"}),
    **{(resource.group, resource.plural): POLICY_VERBS for resource in CUSTOM.values()},
    # Events go to the namespace of the pod they are about, or "default" for nodes and claims.
    ("", "events"): frozenset({"create"}),
}
# Granted by a Role in karpweb's own namespace only: the cluster_watch leader's Lease.
NAMESPACED_ACCESS: dict[tuple[str, str], frozenset[str]] = {
    (LEASE.group, LEASE.plural): frozenset({"get", "create", "update"}),
}

EVENT_SOURCE = "karpweb"
# A pod stays pending through many provisioning runs and a drain is tried again every round:
# the same event about the same object is sent at most once per this many seconds.
EVENT_DEDUPE_SECONDS = 120.0
EVENT_DEDUPE_SIZE = 10_000  # objects remembered; the least recently seen are forgotten first
# Events waiting to be sent; beyond this (an API server slow for long) new ones are dropped,
# as they are only informational.
EVENT_BACKLOG = 10_000
EVENT_MESSAGE_LIMIT = 1024  # what the API server accepts for a note


class EventOutbox:
    """Events on their way to the API server, sent one at a time by a background thread, so
    recording one costs the caller a dictionary lookup. An event identical to one recorded less
    than ``dedupe_seconds`` ago is dropped. Sending failures are logged, never raised."""

    def __init__(self, dedupe_seconds: float = EVENT_DEDUPE_SECONDS, clock: Callable[[], float] = time.monotonic):
        self.dedupe_seconds = dedupe_seconds
        self._clock = clock
        self._recent: OrderedDict[Hashable, float] = OrderedDict()
        self._backlog: deque[Callable[[], None]] = deque()
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def put(self, key: Hashable, send: Callable[[], None]) -> bool:
        """Queue ``send`` unless an event of the same ``key`` was queued recently; True if queued."""
        now = self._clock()
        with self._changed:
            sent_at = self._recent.get(key)
            if sent_at is not None and now - sent_at < self.dedupe_seconds:
                return False
            if len(self._backlog) >= EVENT_BACKLOG:
                log.warning("event dropped: %d events are waiting for the API server already", len(self._backlog))
                return False
            self._recent[key] = now
            self._recent.move_to_end(key)
            if len(self._recent) > EVENT_DEDUPE_SIZE:
                self._recent.popitem(last=False)
            self._backlog.append(send)
            # Started on first use, and again in a forked child (threads do not survive a fork).
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._send_forever, name="events", daemon=True)
                self._thread.start()
            self._changed.notify_all()
        return True

    def flush(self, timeout: float) -> bool:
        """Wait until every queued event was sent (or failed); False if ``timeout`` ran out first."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._backlog, timeout)

    def _send_forever(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._backlog)
                send = self._backlog[0]
            try:
                send()
            except Exception as exc:  # an event must never take the thread down
                log.warning("event not recorded: %s", exc)
            with self._changed:
                self._backlog.popleft()
                self._changed.notify_all()


# One per process: clusters come and go per task, what was sent recently must outlive them.
EVENTS = EventOutbox()
# A few seconds at exit for what is still queued (say, a provisioning run from a command).
atexit.register(EVENTS.flush, 5.0)


@dataclass(frozen=True)
class Reply:
    """An answer from the API server: the HTTP status and the decoded JSON body."""

    status: int
    body: Manifest


class KubernetesCluster:
    """A cluster reached through the API server; safe to share between threads."""

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        request_timeout: float = 30.0,
        watch_timeout: int = 10,
        page_size: int = 500,
        retry_delay: float = 1.0,
        events: EventOutbox | None = None,
    ) -> None:
        """``watch_timeout`` bounds one watch request, and so how long ``stop()`` may go unheard;
        ``retry_delay`` is the first pause after a failed list or watch (it doubles up to 30 s)."""
        self.api_client = api_client
        self.request_timeout = request_timeout
        self.watch_timeout = watch_timeout
        self.page_size = page_size
        self.retry_delay = retry_delay
        self.core = client.CoreV1Api(api_client)
        self.apps = client.AppsV1Api(api_client)
        self.policy = client.PolicyV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.coordination = client.CoordinationV1Api(api_client)
        self.events = events or EVENTS

    @classmethod
    def from_environment(cls, kubeconfig: str | None = None, **options: Any) -> KubernetesCluster:
        """The cluster this process should talk to: the kubeconfig at ``kubeconfig`` when given;
        else the pod's service account when running in a cluster (KUBERNETES_SERVICE_HOST is set);
        else $KUBECONFIG or ~/.kube/config."""
        configuration = client.Configuration()
        if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            source = "the in-cluster service account"
            load: Callable[[], None] = partial(config.load_incluster_config, client_configuration=configuration)
        else:
            path = kubeconfig or os.environ.get("KUBECONFIG") or DEFAULT_KUBECONFIG
            source = f"kubeconfig {path}"
            load = partial(config.load_kube_config, config_file=path, client_configuration=configuration)
        try:
            load()
        # The loaders raise ConfigException, OSError, YAML and type errors for a bad file; all of
        # them mean the same thing to the person starting the process.
        except Exception as exc:
            raise ClusterError(f"cannot configure the Kubernetes client from {source}: {exc}", retryable=False) from exc
        return cls(client.ApiClient(configuration), **options)

    def close(self) -> None:
        self.api_client.close()

    # -- reads

    def pods(self) -> list[Manifest]:
        """Every pod in every namespace, except those that have finished (Succeeded, Failed)."""
        items, _ = self.list_kind("Pod")
        return [pod for pod in items if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]

    def nodes(self) -> list[Manifest]:
        return self.list_kind("Node")[0]

    def daemonsets(self) -> list[Manifest]:
        return self._list(DAEMONSET, self.apps.list_daemon_set_for_all_namespaces)[0]

    def pdbs(self) -> list[Manifest]:
        return self._list(PDB, self.policy.list_pod_disruption_budget_for_all_namespaces)[0]

    def list_kind(self, kind: str) -> tuple[list[Manifest], str]:
        """Every object of a watchable kind, and the resourceVersion to watch from."""
        resource = _lookup(WATCHABLE, kind)
        return self._list(resource, self._list_function(resource))

    # -- NodeClaims

    def create_nodeclaim(self, manifest: Manifest) -> None:
        """Create the claim; one that exists already (a retried task) is left as it is."""
        body = _typed(manifest, NODECLAIM)
        name = body.get("metadata", {}).get("name", "")
        self._send(
            f"create NodeClaim {name}",
            self.custom.create_cluster_custom_object,
            *_coordinates(NODECLAIM),
            body,
            ok={409},
        )

    def delete_nodeclaim(self, name: str) -> None:
        self._send(
            f"delete NodeClaim {name}",
            self.custom.delete_cluster_custom_object,
            *_coordinates(NODECLAIM),
            name,
            ok={404},
        )

    # -- NodePools and EC2NodeClasses, for the sync with the database

    def list_custom(self, kind: str) -> tuple[list[Manifest], str]:
        """Every NodePool or EC2NodeClass, and the list's resourceVersion."""
        resource = _lookup(CUSTOM, kind)
        return self._list(resource, self._list_function(resource))

    def read_custom(self, kind: str, name: str) -> Manifest | None:
        """The object as the cluster has it now, or None when there is none of that name."""
        resource = _lookup(CUSTOM, kind)
        reply = self._send(
            f"read {kind} {name}", self.custom.get_cluster_custom_object, *_coordinates(resource), name, ok={404}
        )
        return None if reply.status == 404 else _typed(reply.body, resource)

    def apply_custom(self, manifest: Manifest) -> Manifest:
        """Create the object, or replace it when the manifest carries the metadata.resourceVersion
        it was based on; returns the object as stored. Raises Conflict (with the cluster's
        current object) when someone else changed or deleted it since, or created one of the
        same name: the caller decides, nothing is overwritten blindly."""
        resource = _lookup(CUSTOM, str(manifest.get("kind")))
        body = _writable(manifest, resource)
        name = body["metadata"].get("name", "")
        based_on = body["metadata"].get("resourceVersion")
        what = f"{resource.kind} {name}"
        if based_on:
            reply = self._send(
                f"replace {what}",
                self.custom.replace_cluster_custom_object,
                *_coordinates(resource),
                name,
                body,
                ok={404, 409},
            )
            if reply.status == 404:
                raise Conflict(f"{what} was deleted from the cluster after resourceVersion {based_on}")
            if reply.status == 409:
                raise Conflict(
                    f"{what} changed in the cluster after resourceVersion {based_on}: {_message(reply.body)}",
                    current=self.read_custom(resource.kind, name),
                )
        else:
            reply = self._send(
                f"create {what}", self.custom.create_cluster_custom_object, *_coordinates(resource), body, ok={409}
            )
            if reply.status == 409:
                raise Conflict(
                    f"{what} already exists in the cluster: {_message(reply.body)}",
                    current=self.read_custom(resource.kind, name),
                )
        return _typed(reply.body, resource)

    def delete_custom(self, kind: str, name: str, resource_version: str | None = None) -> None:
        """Delete the object (one already gone is fine). With ``resource_version`` only if the
        object is still at that version; Conflict (with the current object) otherwise."""
        resource = _lookup(CUSTOM, kind)
        options = client.V1DeleteOptions(
            preconditions=client.V1Preconditions(resource_version=resource_version) if resource_version else None
        )
        reply = self._send(
            f"delete {kind} {name}",
            self.custom.delete_cluster_custom_object,
            *_coordinates(resource),
            name,
            body=options,
            ok={404, 409},
        )
        if reply.status == 409:
            raise Conflict(
                f"{kind} {name} changed in the cluster after resourceVersion {resource_version}: "
                f"{_message(reply.body)}",
                current=self.read_custom(kind, name),
            )

    # -- nodes

    def cordon(self, node: str) -> None:
        self._send(f"cordon Node {node}", self.core.patch_node, node, {"spec": {"unschedulable": True}})

    def taint(self, node: str, taint: Manifest) -> None:
        """Add ``taint`` unless the node has one with its key and effect (the API allows only
        one). The patch carries the taints list as read and the node's resourceVersion, so a
        concurrent change to the taints is never overwritten: the server refuses (409) and the
        node is read again."""
        what = f"taint Node {node} with {_show_taint(taint)}"
        for _ in range(TAINT_ATTEMPTS):
            current = self._send(f"read Node {node}", self.core.read_node, node).body
            taints = (current.get("spec") or {}).get("taints") or []
            if any(_same_taint(existing, taint) for existing in taints):
                return
            patch: Manifest = {"spec": {"taints": [*taints, taint]}}
            version = (current.get("metadata") or {}).get("resourceVersion")
            if version:
                patch["metadata"] = {"resourceVersion": version}
            if self._send(what, self.core.patch_node, node, patch, ok={409}).status != 409:
                return
        raise ClusterError(f"{what} failed: the Node changed under {TAINT_ATTEMPTS} attempts in a row")

    def untaint(self, node: str, taint: Manifest) -> None:
        """Remove the taint with ``taint``'s key and effect, guarded by the resourceVersion
        read, as :meth:`taint` adds one."""
        what = f"remove {_show_taint(taint)} from Node {node}"
        for _ in range(TAINT_ATTEMPTS):
            current = self._send(f"read Node {node}", self.core.read_node, node, ok={404})
            if current.status == 404:
                return
            taints = (current.body.get("spec") or {}).get("taints") or []
            kept = [existing for existing in taints if not _same_taint(existing, taint)]
            if len(kept) == len(taints):
                return
            patch: Manifest = {"spec": {"taints": kept}}
            version = (current.body.get("metadata") or {}).get("resourceVersion")
            if version:
                patch["metadata"] = {"resourceVersion": version}
            if self._send(what, self.core.patch_node, node, patch, ok={409}).status != 409:
                return
        raise ClusterError(f"{what} failed: the Node changed under {TAINT_ATTEMPTS} attempts in a row")

    def delete_pod(self, namespace: str, name: str, grace_seconds: int | None = None) -> None:
        options = {} if grace_seconds is None else {"grace_period_seconds": grace_seconds}
        self._send(
            f"delete Pod {namespace}/{name}", self.core.delete_namespaced_pod, name, namespace, ok={404}, **options
        )

    def label(self, node: str, key: str, value: str) -> None:
        patch = {"metadata": {"labels": {key: value}}}
        self._send(f"label Node {node} {key}={value}", self.core.patch_node, node, patch)

    def unlabel(self, node: str, key: str) -> None:
        patch = {"metadata": {"labels": {key: None}}}  # a merge patch's null removes the key
        self._send(f"label Node {node} {key}-", self.core.patch_node, node, patch)

    def evict(self, namespace: str, name: str) -> Eviction:
        """Ask the Eviction API to evict the pod (see ``Eviction``)."""
        eviction = client.V1Eviction(
            api_version="policy/v1", kind="Eviction", metadata=client.V1ObjectMeta(name=name, namespace=namespace)
        )
        reply = self._send(
            f"evict Pod {namespace}/{name}",
            self.core.create_namespaced_pod_eviction,
            name,
            namespace,
            eviction,
            ok={404, 429, 500},
        )
        # 429: a PodDisruptionBudget allows no disruption now. The API answers a pod that more
        # than one selects with a 500 ("more than one PodDisruptionBudget"): refused too, as
        # upstream reads it; any other 500 is the server's trouble.
        if reply.status == 500 and "more than one" not in str(reply.body.get("message", "")):
            raise ClusterError(f"evict Pod {namespace}/{name} failed: {reply.body.get('message', '')} (HTTP 500)")
        if reply.status == 500:
            return Eviction.REFUSED_MANY_BUDGETS
        if reply.status == 429:
            return Eviction.REFUSED
        return Eviction.GONE if reply.status == 404 else Eviction.EVICTED

    def delete_node(self, node: str) -> None:
        self._send(f"delete Node {node}", self.core.delete_node, node, ok={404})

    # -- events

    def record_event(self, event: ObjectEvent) -> None:
        """Queue a core v1 Event about ``event.involved`` (see :class:`EventOutbox`)."""
        self.events.put(event, partial(self._create_event, event))

    def _create_event(self, event: ObjectEvent) -> None:
        ref = event.involved
        # Nodes and NodeClaims are cluster-scoped: their events live in "default", as client-go puts them.
        namespace = ref.namespace or "default"
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        involved = {"apiVersion": ref.api_version, "kind": ref.kind, "name": ref.name}
        involved |= {k: v for k, v in (("namespace", ref.namespace), ("uid", ref.uid)) if v}
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            # Named as client-go names them: the object's name and the time in hex nanoseconds.
            "metadata": {"name": f"{ref.name}.{time.time_ns():x}", "namespace": namespace},
            "involvedObject": involved,
            "type": event.type,
            "reason": event.reason,
            "message": event.message[:EVENT_MESSAGE_LIMIT],
            "source": {"component": EVENT_SOURCE},
            "reportingComponent": EVENT_SOURCE,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        self._send(
            f"create Event {event.reason} for {ref.kind} {ref.name}", self.core.create_namespaced_event, namespace, body
        )

    # -- leases, for leader election

    def read_lease(self, namespace: str, name: str) -> Manifest | None:
        reply = self._send(
            f"read Lease {namespace}/{name}", self.coordination.read_namespaced_lease, name, namespace, ok={404}
        )
        return None if reply.status == 404 else _typed(reply.body, LEASE)

    def write_lease(self, manifest: Manifest) -> Manifest:
        """Create the Lease, or replace it when the manifest carries the resourceVersion it was
        read at; Conflict when someone else created or changed it first."""
        body = _writable(manifest, LEASE)
        namespace, name = body["metadata"].get("namespace", ""), body["metadata"].get("name", "")
        what = f"Lease {namespace}/{name}"
        if body["metadata"].get("resourceVersion"):
            reply = self._send(
                f"update {what}", self.coordination.replace_namespaced_lease, name, namespace, body, ok={404, 409}
            )
        else:
            reply = self._send(f"create {what}", self.coordination.create_namespaced_lease, namespace, body, ok={409})
        if reply.status in (404, 409):
            raise Conflict(f"{what} changed meanwhile: {_message(reply.body)}")
        return _typed(reply.body, LEASE)

    # -- watching

    def watch(self, handle: Callable[[Event], None], kinds: Iterable[str], stop: Callable[[], bool]) -> None:
        """List then watch each kind until ``stop()``; see :meth:`follow`. Several kinds are
        followed in parallel threads, and ``handle`` is never called by two at once. A failure
        that retrying cannot mend (say, 403 Forbidden) stops every kind and is raised here."""
        resources = [_lookup(WATCHABLE, kind) for kind in dict.fromkeys(kinds)]
        if len(resources) == 1:
            self.follow(resources[0].kind, handle, stop)
            return
        one_at_a_time = threading.Lock()

        def serialized(event: Event) -> None:
            with one_at_a_time:
                handle(event)

        failed = threading.Event()

        def stopped() -> bool:
            return failed.is_set() or stop()

        with ThreadPoolExecutor(max_workers=len(resources), thread_name_prefix="watch") as pool:
            futures = [pool.submit(self.follow, r.kind, serialized, stopped) for r in resources]
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            errors = [f.exception() for f in done if f.exception() is not None]
            if errors:
                failed.set()  # the other kinds notice within one watch request
                raise errors[0]

    def follow(self, kind: str, handle: Callable[[Event], None], stop: Callable[[], bool]) -> None:
        """List and watch one kind until ``stop()``. Lists again when the watched version has
        expired; objects that vanished meanwhile are announced as DELETED, so ``handle`` sees
        every deletion even across a gap. Retryable failures pause (doubling up to 30 s) and
        resume; events may then be seen twice, which handlers tolerate by design (they act on
        the state an event shows, not on the event)."""
        known: dict[str, Manifest] = {}

        def remember(event: Event) -> None:
            if event.type == "DELETED":
                known.pop(_key(event.object), None)
            else:
                known[_key(event.object)] = event.object
            handle(event)

        version: str | None = None
        failures = 0
        while not stop():
            try:
                if version is None:
                    version = self._relist(kind, remember, known)
                version = self.watch_once(kind, remember, version, stop)
                failures = 0
            except ClusterError as exc:
                if not exc.retryable:
                    raise
                failures += 1
                pause = min(30.0, self.retry_delay * 2 ** (failures - 1))
                log.warning("%s; trying again in %.1f s", exc, pause)
                _sleep(pause, stop)

    def watch_once(
        self,
        kind: str,
        handle: Callable[[Event], None],
        resource_version: str,
        stop: Callable[[], bool] = lambda: False,
    ) -> str | None:
        """One watch request from ``resource_version`` (it lasts up to ``watch_timeout``
        seconds); returns the version to resume from, or None when that version has expired
        (410 Gone) and the caller must list again. BOOKMARK events only advance the version."""
        resource = _lookup(WATCHABLE, kind)
        stream = watch.Watch(return_type="object")  # "object": events keep their dicts, no models
        events = stream.stream(
            self._list_function(resource),
            resource_version=resource_version or None,
            allow_watch_bookmarks=True,
            timeout_seconds=self.watch_timeout,
            _request_timeout=(CONNECT_TIMEOUT, self.watch_timeout + CONNECT_TIMEOUT),
        )
        version = resource_version
        try:
            for event in _well_formed(events, f"watch {resource.plural}"):
                obj = event["raw_object"]
                version = (obj.get("metadata") or {}).get("resourceVersion") or version
                if event["type"] != "BOOKMARK":
                    handle(Event(event["type"], resource.kind, _typed(obj, resource)))
                if stop():
                    stream.stop()
                    break
        except ApiException as exc:
            if exc.status == 410:
                log.info("watch of %s from resourceVersion %s expired; listing again", resource.plural, version)
                return None
            raise _api_error(exc, f"watch {resource.plural}") from exc
        except urllib3.exceptions.ReadTimeoutError:
            pass  # a quiet server that outlived timeoutSeconds: just watch again from here
        except urllib3.exceptions.HTTPError as exc:
            raise ClusterError(f"watch {resource.plural} failed: the connection broke ({exc})") from exc
        return version

    def _relist(self, kind: str, handle: Callable[[Event], None], known: dict[str, Manifest]) -> str:
        items, version = self.list_kind(kind)
        listed = {_key(item) for item in items}
        for key in [key for key in known if key not in listed]:
            handle(Event("DELETED", kind, known[key]))
        for item in items:
            handle(Event("ADDED", kind, item))
        return version

    # -- plumbing

    def _list_function(self, resource: Resource) -> Callable[..., Any]:
        """The client method that lists (and, with watch=True, watches) ``resource``."""
        if resource.kind in CUSTOM:
            return partial(self.custom.list_cluster_custom_object, *_coordinates(resource))
        return {
            "Pod": self.core.list_pod_for_all_namespaces,
            "Node": self.core.list_node,
        }[resource.kind]

    def _list(self, resource: Resource, function: Callable[..., Any]) -> tuple[list[Manifest], str]:
        """Every item, page by page, and the resourceVersion of the (consistent) listing."""
        items: list[Manifest] = []
        token = None
        while True:
            page = self._send(
                f"list {resource.plural}", function, limit=self.page_size, **({"_continue": token} if token else {})
            ).body
            items += [_typed(item, resource) for item in page.get("items") or []]
            meta = page.get("metadata") or {}
            token = meta.get("continue")
            if not token:
                return items, str(meta.get("resourceVersion") or "")

    def _send(
        self, action: str, function: Callable[..., Any], *args: Any, ok: Collection[int] = (), **kwargs: Any
    ) -> Reply:
        """Call an official client method and decode its JSON answer. An error status listed in
        ``ok`` comes back as a Reply (a 404 on delete means done); any other failure is raised
        as a ClusterError that starts with ``action``."""
        try:
            response = function(*args, _preload_content=False, _request_timeout=self._timeout(), **kwargs)
            return Reply(response.status, _decode(response.data, action))
        except ApiException as exc:
            if exc.status in ok:
                return Reply(exc.status, _decode(exc.body, action, strict=False))
            raise _api_error(exc, action) from exc
        except urllib3.exceptions.HTTPError as exc:
            raise ClusterError(f"{action} failed: the API server did not answer ({exc})") from exc

    def _timeout(self) -> tuple[float, float]:
        return (min(CONNECT_TIMEOUT, self.request_timeout), self.request_timeout)


def _lookup(table: dict[str, Resource], kind: str) -> Resource:
    try:
        return table[kind]
    except KeyError:
        raise ClusterError(f"kind {kind!r} is not one of {', '.join(table)}", retryable=False) from None


def _coordinates(resource: Resource) -> tuple[str, str, str]:
    return resource.group, resource.version, resource.plural


def _typed(obj: Manifest, resource: Resource) -> Manifest:
    """The object with apiVersion and kind: list items come without them from the API server."""
    return {"apiVersion": resource.api_version, "kind": resource.kind, **obj}


def _writable(manifest: Manifest, resource: Resource) -> Manifest:
    """What a create or replace may carry: no status (a subresource owned by the controller)
    and no server-owned metadata."""
    meta = {k: v for k, v in (manifest.get("metadata") or {}).items() if k not in SERVER_OWNED_METADATA}
    body = {k: v for k, v in manifest.items() if k not in ("metadata", "status")}
    return {**_typed(body, resource), "metadata": meta}


def _well_formed(events: Iterator[dict[str, Any]], action: str) -> Iterator[dict[str, Any]]:
    """``events``, with a line that is no watch event (no type, no object) reported as a
    ClusterError instead of the client's KeyError."""
    while True:
        try:
            event = next(events)
        except StopIteration:
            return
        except (KeyError, TypeError) as exc:
            raise ClusterError(
                f"{action} failed: the API server sent a line that is not a watch event ({exc!r})"
            ) from exc
        if not isinstance(event.get("raw_object"), dict):
            raise ClusterError(f"{action} failed: the API server sent an event without an object")
        yield event


def _key(obj: Manifest) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _same_taint(a: Manifest, b: Manifest) -> bool:
    return a.get("key") == b.get("key") and a.get("effect") == b.get("effect")


def _show_taint(taint: Manifest) -> str:
    value = f"={taint['value']}" if taint.get("value") else ""
    return f"{taint.get('key')}{value}:{taint.get('effect')}"


def _decode(data: bytes | str | None, action: str, *, strict: bool = True) -> Manifest:
    """The JSON body; error bodies that are not JSON (a proxy's HTML page) become {}."""
    if not data:
        return {}
    try:
        decoded = json.loads(data)
    except ValueError:
        if not strict:
            return {}
        raise ClusterError(f"{action} failed: the API server answered with something that is not JSON") from None
    return decoded if isinstance(decoded, dict) else {}


def _message(body: Manifest) -> str:
    return str(body.get("message") or body.get("reason") or "no details given")


def _api_error(exc: ApiException, action: str) -> ClusterError:
    """``exc`` for people: the action, the API server's message (from its Status body) and
    the HTTP status. Throttling, timeouts, expired lists and server errors are retryable;
    refusals (forbidden, invalid, not found) are not."""
    status = exc.status or 0
    body = _decode(exc.body, action, strict=False)
    message = body.get("message") or exc.reason or "no details given"
    retryable = status in (0, 408, 410, 429) or status >= 500
    return ClusterError(f"{action} failed: {message} (HTTP {status})", retryable=retryable)


def _sleep(seconds: float, stop: Callable[[], bool]) -> None:
    """Sleep, but wake up early when ``stop()`` turns true."""
    deadline = time.monotonic() + seconds
    while not stop() and (left := deadline - time.monotonic()) > 0:
        time.sleep(min(0.1, left))
