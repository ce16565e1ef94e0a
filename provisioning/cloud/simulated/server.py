"""The simulated AWS process: seed the account (and the interruption queue with its rules),
then serve moto behind the interruption and capacity middleware on 127.0.0.1 until SIGINT or
SIGTERM."""

from __future__ import annotations

import argparse
import logging
import signal
import threading

from provisioning.cloud.simulated.capacity import INSUFFICIENT_CAPACITY_ENV, CapacityMiddleware, ExhaustedOfferings
from provisioning.cloud.simulated.interruptions import (
    DEFAULT_SPOT_NOTICE_SECONDS,
    SPOT_NOTICE_ENV,
    InterruptionMiddleware,
    spot_notice_from_env,
)
from provisioning.cloud.simulated.seed import (
    DEFAULT_CLUSTER,
    DEFAULT_KUBERNETES_VERSION,
    DEFAULT_REGION,
    QUEUE_NAME,
    seed_account,
    seed_interruption_queue,
)

DESCRIPTION = "The simulated AWS of the embedded default: a moto server seeded like an EKS account for Karpenter."


def quicken_sqs_clock() -> None:
    """moto's SQS asks the time of every message of a queue on every call (is it visible? is
    it delayed?), each time through datetime arithmetic that costs a few microseconds: a queue
    of 5,000 messages took a quarter of a second per ReceiveMessage. The same clock, read as
    ``time.time()``, makes each call some milliseconds; what moto answers is unchanged."""
    import time

    from moto.sqs import models

    original = models.unix_time_millis

    def unix_time_millis(dt=None) -> float:
        return time.time() * 1000.0 if dt is None else original(dt)

    models.unix_time_millis = unix_time_millis


def build_app(
    offerings: ExhaustedOfferings,
    region: str = DEFAULT_REGION,
    spot_notice_seconds: float = DEFAULT_SPOT_NOTICE_SECONDS,
) -> InterruptionMiddleware:
    """moto behind the capacity middleware, behind the interruption middleware."""
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    capacity = CapacityMiddleware(DomainDispatcherApplication(create_backend_app), offerings, region)
    return InterruptionMiddleware(capacity, region, spot_notice_seconds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m provisioning.cloud.simulated", description=DESCRIPTION)
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free port)")
    parser.add_argument("--region", default=DEFAULT_REGION)
    parser.add_argument("--cluster", default=DEFAULT_CLUSTER)
    parser.add_argument("--kubernetes-version", default=DEFAULT_KUBERNETES_VERSION)
    parser.add_argument(
        "--interruption-queue",
        default=None,
        help="the SQS queue the interruption rules target (default: the cluster name; an empty string: none)",
    )
    parser.add_argument("--verbose", action="store_true", help="log every request")
    args = parser.parse_args(argv)

    try:
        offerings = ExhaustedOfferings.from_env()
    except ValueError as exc:
        parser.error(f"{INSUFFICIENT_CAPACITY_ENV}: {exc}")
    try:
        spot_notice_seconds = spot_notice_from_env()
    except ValueError as exc:
        parser.error(f"{SPOT_NOTICE_ENV}: {exc}")
    queue = args.cluster if args.interruption_queue is None else args.interruption_queue
    if queue and not QUEUE_NAME.match(queue):
        parser.error(f"--interruption-queue: {queue!r}: 1 to 80 letters, digits, hyphens or underscores")
    if not args.verbose:
        logging.getLogger("werkzeug").setLevel(logging.WARNING)

    from moto.moto_server.werkzeug_app import MotoRequestHandler
    from werkzeug.serving import make_server

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, frame: stop.set())

    quicken_sqs_clock()
    seed_account(args.region, args.cluster, args.kubernetes_version)
    if queue:
        seed_interruption_queue(args.region, queue)
    if stop.is_set():  # stopped while seeding
        return 0
    app = build_app(offerings, args.region, spot_notice_seconds)
    server = make_server("127.0.0.1", args.port, app, threaded=True, request_handler=MotoRequestHandler)
    thread = threading.Thread(target=server.serve_forever, args=(0.2,), name="moto", daemon=True)
    thread.start()
    print(f"simulated AWS on http://127.0.0.1:{server.server_port} (region {args.region})", flush=True)
    while not stop.wait(0.2):
        if not thread.is_alive():
            return 1
    server.shutdown()
    server.server_close()
    return 0
