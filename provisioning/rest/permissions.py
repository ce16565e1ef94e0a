"""The dashboard's roles on the API: reading needs viewer, writing needs editor (admin
endpoints, when there are any, need admin). Unauthenticated requests get 401 with the
token scheme to use; a user or token without the role gets 403 saying which is missing."""

from __future__ import annotations

from rest_framework.permissions import SAFE_METHODS, BasePermission

from provisioning.ui.access import EDITOR, VIEWER, has_role, refusal


class ByRole(BasePermission):
    message = "this needs the editor role"

    def has_permission(self, request, view) -> bool:
        if not (request.user and request.user.is_authenticated):
            return False
        # A POST that writes nothing (a what-if plan) declares itself a read.
        reads = request.method in SAFE_METHODS or getattr(view, "post_is_read", False)
        needed = VIEWER if reads else EDITOR
        if has_role(request.user, needed):
            return True
        self.message = refusal(request.user, needed) + " An admin grants roles: manage.py grant USER ROLE."
        return False
