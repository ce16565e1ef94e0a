"""Make (or reuse) the TLS material for the validating admission webhook.

Writes, into ``--out`` (default ``<VAR_DIR>/webhook-certs``):

* ``ca.crt`` / ``ca.key``: a self-signed CA; its PEM, base64-encoded, is the ``caBundle`` of
  the ValidatingWebhookConfiguration;
* ``tls.crt`` / ``tls.key``: the serving certificate gunicorn presents (the names match the keys of
  a ``kubernetes.io/tls`` Secret), signed by that CA, with SANs ``<svc>``, ``<svc>.<ns>``,
  ``<svc>.<ns>.svc``, ``<svc>.<ns>.svc.cluster.local``, ``localhost`` and ``127.0.0.1``. The
  apiserver calls ``https://<svc>.<ns>.svc:443/...`` and, being Go, ignores the Common Name.

Idempotent: valid files with the expected SANs are reused. A serving certificate that is missing,
mismatched or close to expiry is re-issued by the *existing* CA when that CA is still good, so the
caBundle already patched into the cluster stays valid. ``--force`` replaces everything.

Keys are EC P-256 (small, fast TLS handshakes; the apiserver's Go client verifies ECDSA) and are
written with mode 0600. The last line on stdout is the caBundle, so
``CA_BUNDLE=$(python manage.py webhook_certs -v 0)`` works.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import os
import re
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

CA_CERT = "ca.crt"
CA_KEY = "ca.key"
TLS_CERT = "tls.crt"
TLS_KEY = "tls.key"

# Kubernetes Service names are RFC 1035 labels; namespaces are RFC 1123 labels.
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
MAX_LABEL = 63
MAX_DAYS = 3650
# Certificates are back-dated a little so a node whose clock is slightly behind accepts them.
BACKDATE = dt.timedelta(minutes=5)
# A serving certificate with less than this left (or a third of --days, if smaller) is re-issued.
RENEW_BEFORE = dt.timedelta(days=30)
# The kustomize overlay that turns these files into the webhook's Secret and caBundle.
OVERLAY = "deploy/overlays/no-cert-manager"
LOCAL_DNS = ("localhost",)
LOCAL_IPS = (ipaddress.ip_address("127.0.0.1"),)


@dataclass(frozen=True)
class Sans:
    dns: frozenset[str]
    ips: frozenset[ipaddress.IPv4Address | ipaddress.IPv6Address]


def expected_sans(service: str, namespace: str) -> Sans:
    dns = [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
        *LOCAL_DNS,
    ]
    return Sans(dns=frozenset(dns), ips=frozenset(LOCAL_IPS))


def cert_sans(cert: x509.Certificate) -> Sans:
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return Sans(dns=frozenset(), ips=frozenset())
    return Sans(
        dns=frozenset(ext.get_values_for_type(x509.DNSName)),
        ips=frozenset(ext.get_values_for_type(x509.IPAddress)),
    )


def ca_bundle(ca_pem: bytes) -> str:
    return base64.b64encode(ca_pem).decode("ascii")


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _same_public_key(key, cert: x509.Certificate) -> bool:
    fmt = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return key.public_key().public_bytes(*fmt) == cert.public_key().public_bytes(*fmt)


def make_ca(service: str, namespace: str, days: int) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _new_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{service}.{namespace} webhook CA")])
    now = _now()
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(ski, critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def make_serving(
    ca_cert: x509.Certificate,
    ca_key,
    service: str,
    namespace: str,
    days: int,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _new_key()
    sans = expected_sans(service, namespace)
    now = _now()
    # Never outlive the CA: the chain would stop verifying on the CA's expiry anyway.
    not_after = min(now + dt.timedelta(days=days), ca_cert.not_valid_after_utc)
    ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{service}.{namespace}.svc")]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName(name) for name in sorted(sans.dns)]
                + [x509.IPAddress(ip) for ip in sorted(sans.ips, key=str)]
            ),
            critical=False,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return cert, key


def _load_pair(cert_path: Path, key_path: Path):
    """(cert, key) when both files parse and belong together, else None."""
    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError):
        return None
    if not _same_public_key(key, cert):
        return None
    return cert, key


def _is_ca(cert: x509.Certificate) -> bool:
    try:
        return cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        return False


def _write(path: Path, data: bytes, mode: int) -> None:
    """Atomic write with the final mode set before any byte lands on disk."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)  # left over from an interrupted run
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)  # the umask may have narrowed it
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


class Command(BaseCommand):
    help = (
        "Write a self-signed CA and a serving certificate for the validating admission webhook "
        "(reused when still valid), then print the base64 caBundle as the last line."
    )

    # Making certificates must not depend on the rest of the project passing its checks (it runs in
    # init containers and before the first migrate).
    requires_system_checks = []

    def add_arguments(self, parser):
        parser.add_argument("--service", default="karpweb-webhook", help="Service name (default %(default)s)")
        parser.add_argument("--namespace", default="karpweb", help="Service namespace (default %(default)s)")
        parser.add_argument("--out", default=None, help="Directory for the files (default <VAR_DIR>/webhook-certs)")
        parser.add_argument(
            "--days", type=int, default=365, help="Serving certificate lifetime in days (default %(default)s)"
        )
        parser.add_argument(
            "--ca-days",
            type=int,
            default=MAX_DAYS,
            help="CA lifetime in days when a new CA is made (default %(default)s)",
        )
        parser.add_argument("--force", action="store_true", help="Replace the CA and the serving certificate")

    def handle(self, *args, **options):
        service = options["service"] or ""
        namespace = options["namespace"] or ""
        days = options["days"]
        ca_days = options["ca_days"]
        if len(service) > MAX_LABEL or not DNS1035_LABEL.match(service):
            raise CommandError(
                f"--service {service!r} is not a valid Service name: lower-case letters, digits and '-', "
                f"starting with a letter, ending with a letter or digit, at most {MAX_LABEL} characters"
            )
        if len(namespace) > MAX_LABEL or not DNS1123_LABEL.match(namespace):
            raise CommandError(
                f"--namespace {namespace!r} is not a valid namespace: lower-case letters, digits and '-', "
                f"starting and ending with a letter or digit, at most {MAX_LABEL} characters"
            )
        if not 1 <= days <= MAX_DAYS:
            raise CommandError(f"--days {days}: expected 1..{MAX_DAYS}")
        if not days <= ca_days <= MAX_DAYS:
            raise CommandError(f"--ca-days {ca_days}: expected --days ({days})..{MAX_DAYS}")

        out = Path(options["out"]) if options["out"] else Path(settings.VAR_DIR) / "webhook-certs"
        if out.exists() and not out.is_dir():
            raise CommandError(f"--out {out}: exists and is not a directory")
        try:
            out.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise CommandError(f"--out {out}: {exc.strerror}") from exc

        try:
            ca_pem, notes = self._ensure(out, service, namespace, days, ca_days, options["force"])
        except OSError as exc:
            raise CommandError(f"cannot write certificates in {out}: {exc}") from exc

        bundle = ca_bundle(ca_pem)
        if options["verbosity"] >= 1:
            for note in notes:
                self.stdout.write(note)
            self.stdout.write(
                f"Deploy:  kubectl apply -k {OVERLAY}  (it reads {CA_CERT}, {TLS_CERT} and {TLS_KEY} "
                f"from {OVERLAY}/certs: --out {OVERLAY}/certs writes them there)"
            )
        self.stdout.write(bundle)

    def _ensure(self, out: Path, service: str, namespace: str, days: int, ca_days: int, force: bool):
        now = _now()
        notes: list[str] = []
        ca_pair = None if force else _load_pair(out / CA_CERT, out / CA_KEY)
        # A CA is kept only if it is a CA and outlives a serving certificate issued today.
        if ca_pair is not None:
            ca_cert, _ = ca_pair
            if not _is_ca(ca_cert) or ca_cert.not_valid_after_utc < now + dt.timedelta(days=days):
                ca_pair = None
        if ca_pair is None:
            ca_cert, ca_key = make_ca(service, namespace, ca_days)
            _write(out / CA_KEY, _key_pem(ca_key), 0o600)
            _write(out / CA_CERT, ca_cert.public_bytes(serialization.Encoding.PEM), 0o644)
            notes.append(f"CA:      wrote {out / CA_CERT} (expires {ca_cert.not_valid_after_utc:%Y-%m-%d})")
            new_ca = True
        else:
            ca_cert, ca_key = ca_pair
            notes.append(f"CA:      reused {out / CA_CERT} (expires {ca_cert.not_valid_after_utc:%Y-%m-%d})")
            new_ca = False

        reason = None
        tls_pair = None if new_ca else _load_pair(out / TLS_CERT, out / TLS_KEY)
        if tls_pair is None:
            reason = "new CA" if new_ca else "missing or unreadable"
        else:
            tls_cert, _ = tls_pair
            renew_before = min(RENEW_BEFORE, dt.timedelta(days=days) / 3)
            try:
                tls_cert.verify_directly_issued_by(ca_cert)
            except (ValueError, TypeError, InvalidSignature):
                reason = "not signed by the CA"
            else:
                if cert_sans(tls_cert) != expected_sans(service, namespace):
                    reason = "SANs differ"
                elif tls_cert.not_valid_before_utc > now or tls_cert.not_valid_after_utc - now < renew_before:
                    reason = "expired or expiring soon"
        if reason is None:
            notes.append(f"Serving: reused {out / TLS_CERT} (expires {tls_cert.not_valid_after_utc:%Y-%m-%d})")
        else:
            tls_cert, tls_key = make_serving(ca_cert, ca_key, service, namespace, days)
            _write(out / TLS_KEY, _key_pem(tls_key), 0o600)
            _write(out / TLS_CERT, tls_cert.public_bytes(serialization.Encoding.PEM), 0o644)
            expires = f"{tls_cert.not_valid_after_utc:%Y-%m-%d}"
            names = ", ".join(sorted(expected_sans(service, namespace).dns))
            notes.append(f"Serving: wrote {out / TLS_CERT} ({reason}; expires {expires}; SANs {names}, 127.0.0.1)")
        # Reused key files keep whatever mode they had; narrow it.
        for name in (CA_KEY, TLS_KEY):
            path = out / name
            if path.stat().st_mode & 0o077:
                path.chmod(0o600)
                notes.append(f"Fixed:   {path} mode set to 0600")
        return ca_cert.public_bytes(serialization.Encoding.PEM), notes
