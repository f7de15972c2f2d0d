"""Per-application TLS certificates for the driver control endpoint.

The operator issues one self-signed certificate per SparkApplication and puts it, with its
key, into the application's control Secret (data keys :data:`CERT_KEY` and :data:`KEY_KEY`).
The driver serves HTTPS with it (``spark.sparkglass.control.tls.cert-file``/``key-file``)
and the operator and the service pin it (:class:`~sparkglass.runtime.control.client.ControlTLS`
with ``ca_pem`` and ``server_name`` = the driver Service's DNS name), so that no other
certificate, not even one from a CA the cluster trusts, is accepted for that driver.

The certificate: ECDSA P-256 key, SHA-256 signature, valid :data:`DEFAULT_VALIDITY` (1 year)
from five minutes before issuance (clock skew); subject alternative names are the driver
Service's DNS names (``svc``, ``svc.ns``, ``svc.ns.svc``, ``svc.ns.svc.<cluster domain>``)
and ``127.0.0.1`` (port-forwarding, and the driver's own checks); ``CA:FALSE``, key usage
digital signature, extended key usage server authentication.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = [
    "CERT_KEY",
    "DEFAULT_VALIDITY",
    "KEY_KEY",
    "MAX_VALIDITY",
    "RENEWAL_MARGIN",
    "ControlCertificate",
    "StoredCertificate",
    "driver_service_dns_names",
    "issue_control_certificate",
    "read_stored_certificate",
    "reissue_reason",
    "server_name",
]

#: Data keys of the certificate and its key in the application's control Secret (the names
#: of a ``kubernetes.io/tls`` Secret, so that tools recognise them).
CERT_KEY = "tls.crt"
KEY_KEY = "tls.key"

DEFAULT_VALIDITY = timedelta(days=365)
#: A certificate this close to its expiry is replaced before a new driver starts with it
#: (never under a running driver, which loaded its certificate when it started).
RENEWAL_MARGIN = timedelta(days=30)
#: The longest validity accepted (browsers' historical cap; a driver lives far shorter).
MAX_VALIDITY = timedelta(days=825)
_MIN_VALIDITY = timedelta(hours=1)
_SKEW = timedelta(minutes=5)

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_NAME = re.compile(
    r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$"
)


@dataclass(frozen=True)
class ControlCertificate:
    """An issued certificate: PEM text of the certificate and of its unencrypted PKCS#8
    key, its expiry (UTC), its DNS names, and the SHA-256 fingerprint of its DER form
    (lower-case hex, for logs and comparisons)."""

    cert_pem: str
    key_pem: str
    not_after: datetime
    dns_names: tuple[str, ...]
    fingerprint_sha256: str

    def secret_data(self) -> dict[str, str]:
        """``stringData`` entries of the control Secret: ``{"tls.crt": ..., "tls.key": ...}``."""
        return {CERT_KEY: self.cert_pem, KEY_KEY: self.key_pem}


def driver_service_dns_names(
    service: str, namespace: str, *, cluster_domain: str = "cluster.local"
) -> list[str]:
    """The names a Pod can reach Service ``service`` in ``namespace`` by, shortest first.

    Raises ``ValueError`` naming the argument when ``service`` or ``namespace`` is not a
    DNS-1123 label (1–63 of ``a-z0-9-``) or ``cluster_domain`` not a DNS name.
    """
    for field, value in (("service", service), ("namespace", namespace)):
        if not _DNS_LABEL.match(value):
            raise ValueError(
                f"{field}: expected a DNS-1123 label (1–63 characters a-z, 0-9, '-', "
                f"starting and ending alphanumeric), got {value!r}"
            )
    if not _DNS_NAME.match(cluster_domain) or len(cluster_domain) > 253:
        raise ValueError(f"cluster_domain: expected a DNS name, got {cluster_domain!r}")
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.{cluster_domain}",
    ]


def issue_control_certificate(
    service: str,
    namespace: str,
    *,
    cluster_domain: str = "cluster.local",
    ip_addresses: Sequence[str] = ("127.0.0.1",),
    validity: timedelta = DEFAULT_VALIDITY,
    now: datetime | None = None,
) -> ControlCertificate:
    """A new key and self-signed certificate for the control endpoint behind ``service``.

    ``ip_addresses``: IPv4/IPv6 literals added as IP SANs (default ``127.0.0.1``);
    ``validity``: 1 h–825 days (default 365 days); ``now``: issuance time (UTC; default the
    current time). Raises ``ValueError`` naming the argument for a bad name, address or
    validity.
    """
    dns_names = driver_service_dns_names(service, namespace, cluster_domain=cluster_domain)
    if not _MIN_VALIDITY <= validity <= MAX_VALIDITY:
        raise ValueError(f"validity: {validity} is out of range: allowed 1 hour–825 days")
    try:
        ips = [ipaddress.ip_address(ip) for ip in ip_addresses]
    except ValueError as exc:
        raise ValueError(f"ip_addresses: {exc}") from None
    issued = (now or datetime.now(UTC)).astimezone(UTC)
    not_after = issued + validity

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns_names[2])])
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    sans += [x509.IPAddress(ip) for ip in ips]
    public = key.public_key()
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(issued - _SKEW)
        .not_valid_after(not_after)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
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
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(public), critical=False)
        .sign(key, hashes.SHA256())
    )
    der = certificate.public_bytes(serialization.Encoding.DER)
    return ControlCertificate(
        cert_pem=certificate.public_bytes(serialization.Encoding.PEM).decode(),
        key_pem=key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode(),
        not_after=not_after,
        dns_names=tuple(dns_names),
        fingerprint_sha256=hashlib.sha256(der).hexdigest(),
    )


@dataclass(frozen=True)
class StoredCertificate:
    """The certificate found in a control Secret: its PEM text, expiry (UTC), DNS names,
    SHA-256 fingerprint (hex) and whether the Secret also holds a key (the key itself is
    never read here: only the driver needs it)."""

    cert_pem: str
    not_after: datetime
    dns_names: tuple[str, ...]
    fingerprint_sha256: str
    has_key: bool


def read_stored_certificate(data: dict[str, str | None]) -> StoredCertificate | None:
    """The certificate in a control Secret's decoded entries (``{"tls.crt": PEM, ...}``).

    None when there is no ``tls.crt`` entry. Raises ``ValueError`` ("tls.crt: ...") when
    the entry is not exactly one PEM certificate.
    """
    pem = data.get(CERT_KEY)
    if not pem:
        return None
    try:
        certificate = x509.load_pem_x509_certificate(pem.encode())
    except ValueError as exc:
        raise ValueError(f"{CERT_KEY}: not a PEM certificate: {exc}") from None
    try:
        sans = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
        dns = tuple(sans.value.get_values_for_type(x509.DNSName))
    except x509.ExtensionNotFound:
        dns = ()
    der = certificate.public_bytes(serialization.Encoding.DER)
    return StoredCertificate(
        cert_pem=pem,
        not_after=certificate.not_valid_after_utc,
        dns_names=dns,
        fingerprint_sha256=hashlib.sha256(der).hexdigest(),
        has_key=bool(data.get(KEY_KEY)),
    )


def server_name(service: str, namespace: str) -> str:
    """The name a client checks the driver's certificate against (and sends as SNI):
    ``<service>.<namespace>.svc``, the certificate's common name, independent of the
    cluster domain."""
    return driver_service_dns_names(service, namespace)[2]


def reissue_reason(
    data: dict[str, str | None],
    service: str,
    namespace: str,
    *,
    now: datetime | None = None,
    margin: timedelta = RENEWAL_MARGIN,
) -> str | None:
    """Why a control Secret's certificate must be (re)issued before a new driver starts,
    or None when it can stay: no certificate or key, an unreadable one, one not issued for
    ``service`` in ``namespace``, or one expiring within ``margin`` (30 days)."""
    try:
        stored = read_stored_certificate(data)
    except ValueError as exc:
        return f"the stored certificate is unreadable ({exc})"
    if stored is None:
        return "no certificate yet"
    if not stored.has_key:
        return f"no {KEY_KEY} next to the certificate"
    if server_name(service, namespace) not in stored.dns_names:
        return f"the certificate is not for {server_name(service, namespace)}"
    moment = (now or datetime.now(UTC)).astimezone(UTC)
    if stored.not_after - margin <= moment:
        return f"the certificate expires at {stored.not_after.isoformat()}"
    return None
