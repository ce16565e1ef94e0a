"""The one seam through which services start work in the background.

Services say *what* is to be done (launch this claim, this batch; pods are pending; export
this policy); the edge says *how*: ``provisioning.tasks`` installs a dispatcher that sends
Celery tasks when the app is ready. So calls flow downward: services never import the tasks
that import them, and a test may install a dispatcher of its own.
"""

from __future__ import annotations

from typing import Protocol


class Dispatcher(Protocol):
    def launch_claim(self, claim_id: int) -> None: ...

    def launch_batch(self, token: str) -> None: ...

    def pods_pending(self) -> None: ...

    def export_policy(self, kind: str, name: str) -> None: ...


_installed: Dispatcher | None = None


def install(dispatcher: Dispatcher) -> None:
    global _installed
    _installed = dispatcher


def dispatcher() -> Dispatcher:
    if _installed is None:
        raise RuntimeError("no dispatcher installed: the provisioning app's ready() installs Celery's")
    return _installed
