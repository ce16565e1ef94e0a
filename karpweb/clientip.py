"""The address a request came from, for the sign-in throttle (django-axes'
AXES_CLIENT_IP_CALLABLE).

Behind ``KARPWEB_TRUSTED_PROXIES`` proxies that each append the address they saw to
X-Forwarded-For (an ingress controller: 1), the client is that many entries from the right;
entries further left were sent by the client and prove nothing. Without proxies, or for a
request that did not pass them (the kubelet's probes), the connection's own address.
"""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest


def client_ip(request: HttpRequest) -> str:
    hops = settings.KARPWEB_TRUSTED_PROXIES
    if hops > 0:
        forwarded = [a.strip() for a in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if a.strip()]
        if len(forwarded) >= hops:
            return forwarded[-hops]
    return request.META.get("REMOTE_ADDR", "")
