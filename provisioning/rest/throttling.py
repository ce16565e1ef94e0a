"""API throttling per token, not per user: two automations of one user each get the rate
(``KARPWEB_API_RATE``), and one running away exhausts only its own. A browser session (the
browsable API, Swagger UI) counts as one client of its user. The counts live in the cache:
Redis when REDIS_URL is set, so every web replica shares them."""

from __future__ import annotations

import hashlib

from rest_framework.authtoken.models import Token
from rest_framework.throttling import SimpleRateThrottle


class PerToken(SimpleRateThrottle):
    scope = "token"

    def get_cache_key(self, request, view) -> str | None:
        if isinstance(request.auth, Token):
            # The key is a secret: the cache holds its digest, never the key itself.
            ident = "token-" + hashlib.sha256(request.auth.key.encode()).hexdigest()[:32]
        elif request.user and request.user.is_authenticated:
            ident = f"session-{request.user.pk}"
        else:
            return None  # refused before it gets here (401)
        return self.cache_format % {"scope": self.scope, "ident": ident}
