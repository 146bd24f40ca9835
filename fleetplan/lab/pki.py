"""Certificates and keys for the lab: one CA per cluster, serving and client certificates.

Everything is generated at run time with `cryptography` and written with mode 0600 (keys) under the
lab's state directory; nothing here is ever committed or printed. ECDSA P-256 keys keep generation
fast on a busy 2-core machine; the service-account signing key is RSA because every consumer of
service-account tokens (including old clients that verify them) understands RS256.

Invariants: a certificate's subject CN is the Kubernetes user name and its O entries are the groups,
exactly as the API server's x509 authenticator reads them; serving certificates carry every DNS name
and IP a client will dial, because verification is by SAN only.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = datetime.timedelta(days=365)
_SKEW = datetime.timedelta(minutes=5)  # tolerate small clock differences between writers and readers

PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _key_pem(key: PrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def write_private(path: Path, data: bytes) -> None:
    """Write secret material readable by the owner only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


@dataclass(frozen=True)
class Issued:
    """A certificate and its private key, both PEM."""

    cert_pem: bytes
    key_pem: bytes

    def write(self, cert_path: Path, key_path: Path) -> None:
        cert_path.parent.mkdir(parents=True, exist_ok=True)
        cert_path.write_bytes(self.cert_pem)
        write_private(key_path, self.key_pem)


class CertificateAuthority:
    """A self-signed CA that issues serving and client certificates."""

    def __init__(self, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> None:
        self._key = key
        self.cert = cert

    @classmethod
    def create(cls, common_name: str) -> CertificateAuthority:
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
        cert = (
            x509.CertificateBuilder()
            .subject_name(name).issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(_now() - _SKEW).not_valid_after(_now() + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .add_extension(ski, critical=False)
            .sign(key, hashes.SHA256())
        )
        return cls(key, cert)

    @classmethod
    def load(cls, cert_path: Path, key_path: Path) -> CertificateAuthority:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError(f"{key_path} is not an ECDSA key")
        return cls(key, cert)

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def write(self, cert_path: Path, key_path: Path) -> None:
        Issued(self.cert_pem, _key_pem(self._key)).write(cert_path, key_path)

    def issue(self, common_name: str, *, groups: tuple[str, ...] = (), dns_names: tuple[str, ...] = (),
              ips: tuple[str, ...] = (), server: bool = False, client: bool = False) -> Issued:
        """Issue a leaf certificate: CN is the user, O entries the groups, SANs the dialled names."""
        key = ec.generate_private_key(ec.SECP256R1())
        attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
        attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + (
            [ExtendedKeyUsageOID.CLIENT_AUTH] if client else [])
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attrs)).issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(_now() - _SKEW).not_valid_after(_now() + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=False,
                                         content_commitment=False, data_encipherment=False,
                                         key_agreement=False, key_cert_sign=False, crl_sign=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                           critical=False)
        )
        sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
        sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        return Issued(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def write_service_account_keys(key_path: Path, pub_path: Path) -> None:
    """The RSA pair the API server signs service-account tokens with (and KCM signs legacy ones)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    write_private(key_path, _key_pem(key))
    pub_path.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                       serialization.PublicFormat.SubjectPublicKeyInfo))
