"""The karpenter.sh/v1, karpenter.sh/v1alpha1 and karpenter.k8s.aws/v1 API: manifests, defaults,
THE validator."""

from provisioning.crd.errors import FieldError, ManifestError, ValidationResult
from provisioning.crd.kinds import EC2NODECLASS, KINDS, NODEOVERLAY, NODEPOOL, Kind
from provisioning.crd.validation import default, kind_of, validate

__all__ = [
    "EC2NODECLASS",
    "KINDS",
    "NODEOVERLAY",
    "NODEPOOL",
    "FieldError",
    "Kind",
    "ManifestError",
    "ValidationResult",
    "default",
    "kind_of",
    "validate",
]
