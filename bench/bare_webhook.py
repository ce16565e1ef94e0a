"""The baseline of bench/webhook_latency.py: a WSGI app that does only what any webhook must
(read the AdmissionReview, parse it, answer its uid allowed) and nothing of karpweb's (no Django,
no validation). Served by the same gunicorn with the same settings as the webhook role, its
latency in the same run is the floor set by HTTP, TLS, gunicorn, the client and the machine, so
a slow karpweb figure can be told from a slow machine.

    gunicorn -c deploy/gunicorn.conf.py bench.bare_webhook:application   (KARPWEB_ROLE=webhook)
"""

from __future__ import annotations

import json


def application(environ, start_response):
    length = int(environ.get("CONTENT_LENGTH") or 0)
    review = json.loads(environ["wsgi.input"].read(length))
    reply = {
        "apiVersion": review.get("apiVersion", "admission.k8s.io/v1"),
        "kind": "AdmissionReview",
        "response": {"uid": review["request"]["uid"], "allowed": True},
    }
    body = json.dumps(reply).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]
