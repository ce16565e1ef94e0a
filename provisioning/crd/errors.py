"""What the validator returns: errors that name a field path, and warnings."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class FieldError:
    """One problem at one place: ``spec.template.spec.requirements[0].operator``."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message

    def as_dict(self) -> dict[str, str]:
        return {"path": self.path, "message": self.message}


@dataclass
class ValidationResult:
    """The verdict on one document: ``kind``/``name`` say which one."""

    kind: str = ""
    name: str = ""
    errors: list[FieldError] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def document(self) -> str:
        if self.kind and self.name:
            return f"{self.kind}/{self.name}"
        return self.kind or self.name or "document"

    def summary(self, limit: int = 20) -> str:
        """All errors on one line each, prefixed by the document, for people."""
        shown = [str(e) for e in self.errors[:limit]]
        if len(self.errors) > limit:
            shown.append(f"... and {len(self.errors) - limit} more")
        return f"{self.document} is invalid:\n" + "\n".join(f"  - {line}" for line in shown)


class ManifestError(ValueError):
    """A document that cannot be read at all (not YAML, too big, too deep...)."""

    def __init__(self, message: str, document: str = "") -> None:
        self.message = message
        self.document = document
        super().__init__(f"{document}: {message}" if document else message)
