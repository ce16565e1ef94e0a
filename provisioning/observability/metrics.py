"""What happens in a process, counted where it happens (see the package docstring for where
each process serves them). Karpenter's names and labels where the meaning is the same;
``karpweb_`` for ours.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import Counter, Histogram

from provisioning.cloud.base import CloudError, InsufficientCapacity

# Karpenter's duration buckets (pkg/metrics DurationBuckets): controller-runtime's, extended
# past a minute, so its dashboards' heatmaps line up with ours.
DURATION_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0,
    1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60, 120, 150, 300,
    450, 600,
)  # fmt: skip
PROVIDER = "aws"

SCHEDULING_DURATION = Histogram(
    "karpenter_scheduler_scheduling_duration_seconds",
    "Duration of scheduling simulations used for deprovisioning and provisioning in seconds.",
    ["controller"],
    buckets=DURATION_BUCKETS,
)
PROVISIONING_DURATION = Histogram(
    "karpweb_provisioning_duration_seconds",
    "Duration of a provisioning run (snapshot of the cluster, solve, Decision and NodeClaims written) in seconds.",
    buckets=DURATION_BUCKETS,
)
PROVISIONING_PODS = Histogram(
    "karpweb_provisioning_pods",
    "Pending pods a provisioning run planned for.",
    buckets=(1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 20000, 50000),
)
BATCH_WINDOW = Histogram(
    "karpweb_batch_window_seconds",
    "How long a batch window stayed open, from the first pending pod to the provisioning run "
    "(closes after KARPWEB_BATCH_IDLE_SECONDS without new pods or KARPWEB_BATCH_MAX_SECONDS in all).",
    buckets=(0.25, 0.5, 1, 1.5, 2, 3, 4, 5, 7.5, 10, 12.5, 15, 20, 30, 60),
)
WEBHOOK_DURATION = Histogram(
    "karpweb_webhook_request_duration_seconds",
    "Time the admission webhook took to answer an AdmissionReview, by kind, operation and result "
    "(allowed, denied, or error: a body that is not an AdmissionReview).",
    ["kind", "operation", "result"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)
CLOUD_DURATION = Histogram(
    "karpenter_cloudprovider_duration_seconds",
    "Duration of cloud provider method calls. Labeled by the controller, method name and provider.",
    ["controller", "method", "provider"],
    buckets=DURATION_BUCKETS,
)
PLAN_VIOLATIONS = Counter(
    "karpweb_plan_violations_total",
    "Rules THE verifier found a provisioning plan breaking, by kind (topology-spread, resources, ...); "
    "the NodeClaims concerned are not launched and their pods stay pending.",
    ["kind"],
)
CLOUD_ERRORS = Counter(
    "karpenter_cloudprovider_errors_total",
    "Total number of errors returned from CloudProvider calls.",
    ["controller", "method", "provider", "error"],
)


@contextmanager
def cloud_call(controller: str, method: str) -> Iterator[None]:
    """Time a call to the cloud and count it if it fails (the error propagates)."""
    started = time.perf_counter()
    try:
        yield
    except CloudError as exc:
        CLOUD_ERRORS.labels(controller, method, PROVIDER, error_label(exc)).inc()
        raise
    finally:
        CLOUD_DURATION.labels(controller, method, PROVIDER).observe(time.perf_counter() - started)


def error_label(exc: CloudError) -> str:
    """Karpenter's value for insufficient capacity; otherwise the reason the NodeClaim gets
    (a short code from a fixed list, so the label stays bounded)."""
    return "InsufficientCapacityError" if isinstance(exc, InsufficientCapacity) else exc.reason
