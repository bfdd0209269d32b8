"""The secure mode of the Apache Kafka test broker: TLS, SCRAM, OAUTHBEARER and ACLs.

Why: production clusters run SASL over TLS with an authorizer, and nothing had run
aiogroup against one (issue 30).  :class:`SecureSetup` holds what a secure node needs
and what a test needs to reach it:

- a throwaway CA and a broker certificate for ``127.0.0.1``/``localhost``, made at
  start with ``cryptography`` (the test extra) and handed to the broker as PEM
  (``ssl.keystore.type=PEM``: no JKS, no keytool);
- SCRAM-SHA-512 users with random passwords, written at format time
  (``kafka-storage format --add-scram``), ``admin`` a super user;
- the listeners: ``SECURE`` (SASL_SSL: SCRAM-SHA-512, and PLAIN for the same users)
  and ``OAUTH`` (SASL_PLAINTEXT, OAUTHBEARER with Kafka's unsecured JWT validator, as
  Kafka's own tests use; sessions end after :data:`OAUTH_REAUTH_MS` or at the token's
  expiry);
- KRaft's ``StandardAuthorizer``; tests grant and revoke ACLs with :func:`grant` and
  :func:`revoke`.

The node keeps a ``PLAINTEXT`` listener on loopback for the controller link, the
inter-broker link and the fixture's own administration (topic creation, ACLs): its
principal, ``User:ANONYMOUS``, is a super user.  Clients under test use the secure
listeners only, and a broker answers metadata with the listener the client came in
on, so every connection a client opens stays on it.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import json
import secrets
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka.abc import AbstractTokenProvider

__all__ = [
    "OAUTHBEARER_USERS",
    "SCRAM_USERS",
    "AclOperation",
    "ResourceType",
    "SecureSetup",
    "UnsecuredJwtProvider",
    "grant",
    "revoke",
    "unsecured_jwt",
]

#: The SCRAM users formatted into a secure node: ``admin`` (a super user), and two
#: principals that have only the ACLs a test grants them.
SCRAM_USERS = ("admin", "alice", "bob")
#: OAUTHBEARER principals need no credentials (unsecured JWTs): any ``sub`` works.
OAUTHBEARER_USERS = ("admin", "carol")
SCRAM_MECHANISM = "SCRAM-SHA-512"
#: The OAUTHBEARER listener's longest session before a client must authenticate again.
OAUTH_REAUTH_MS = 2000


class ResourceType:
    """Kafka's ACL resource type codes (``org.apache.kafka.common.resource.ResourceType``)."""

    TOPIC = 2
    GROUP = 3
    CLUSTER = 4


class AclOperation:
    """Kafka's ACL operation codes (``org.apache.kafka.common.acl.AclOperation``)."""

    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8


_ALLOW = 3  # AclPermissionType.ALLOW
_LITERAL = 3  # PatternType.LITERAL
_PREFIXED = 4  # PatternType.PREFIXED


def _write_tls_material(directory: Path) -> tuple[Path, Path, Path]:
    """A CA and two certificates it signed, as PEM: (ca.pem, broker.pem, client.pem).

    ``broker.pem`` (for ``127.0.0.1``/``localhost``, server auth) and ``client.pem``
    (``CN=alice``, client auth: mutual TLS) each hold the unencrypted PKCS#8 key and the
    chain, the layout Kafka's PEM keystore reads.  Valid for a day; the keys never
    leave the directory.
    """
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID
    except ImportError as exc:  # pragma: no cover - depends on the environment
        from aiogroup.testing.kafka import KafkaSetupError

        raise KafkaSetupError(
            "secure kafka mode: the cryptography package is missing (pip install 'aiogroup[test]')"
        ) from exc

    now = dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=5)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "aiogroup test CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=1))
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
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM

    def issue(name: str, common_name: str, usage: Any, alt_names: list[Any] | None) -> Path:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if alt_names:
            builder = builder.add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        path = directory / name
        path.write_bytes(
            key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
            + cert.public_bytes(pem)
            + ca_cert.public_bytes(pem)
        )
        path.chmod(0o600)
        return path

    ca_path = directory / "ca.pem"
    ca_path.write_bytes(ca_cert.public_bytes(pem))
    broker_path = issue(
        "broker.pem",
        "localhost",
        x509.OID_SERVER_AUTH,
        [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))],
    )
    client_path = issue("client.pem", "alice", x509.OID_CLIENT_AUTH, None)
    return ca_path, broker_path, client_path


@dataclass
class SecureSetup:
    """A secure node's TLS material, users and listener settings (made by :meth:`create`)."""

    directory: Path
    ca_path: Path
    keystore_path: Path
    #: SCRAM-SHA-512 user -> password (random per start).
    passwords: Mapping[str, str] = field(repr=False)
    #: A client certificate the CA signed (``CN=alice``) with its key, as one PEM file:
    #: the SECURE listener asks for a client certificate (``ssl.client.auth=requested``)
    #: and verifies one that is given, so mutual TLS can be shown on it.
    client_keystore_path: Path | None = None

    @classmethod
    def create(cls, directory: Path) -> SecureSetup:
        directory.mkdir(parents=True, exist_ok=True)
        ca_path, keystore_path, client_path = _write_tls_material(directory)
        passwords = {user: secrets.token_hex(12) for user in SCRAM_USERS}
        return cls(directory, ca_path, keystore_path, passwords, client_path)

    def format_args(self) -> list[str]:
        """``kafka-storage format`` arguments that create the SCRAM users."""
        args: list[str] = []
        for user, password in self.passwords.items():
            args += ["--add-scram", f"{SCRAM_MECHANISM}=[name={user},password={password}]"]
        return args

    def listeners(self) -> dict[str, str]:
        """The broker settings of the SECURE and OAUTH listeners and the authorizer
        (the caller adds the listeners themselves to ``listeners``)."""
        supers = ";".join(["User:ANONYMOUS", "User:admin"])
        return {
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": supers,
            "allow.everyone.if.no.acl.found": "false",
            # SCRAM-SHA-512, and PLAIN for the same users: PLAIN sends the password
            # itself, the case the log redaction must cover on a real connection.
            "listener.name.secure.sasl.enabled.mechanisms": f"{SCRAM_MECHANISM},PLAIN",
            "listener.name.secure.scram-sha-512.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            ),
            "listener.name.secure.plain.sasl.jaas.config": (
                "org.apache.kafka.common.security.plain.PlainLoginModule required "
                + " ".join(f'user_{u}="{p}"' for u, p in self.passwords.items())
                + ";"
            ),
            "listener.name.secure.ssl.keystore.type": "PEM",
            "listener.name.secure.ssl.keystore.location": str(self.keystore_path),
            # Mutual TLS, optional: a client that presents a certificate must present
            # one the CA signed; SASL still names the principal.
            "listener.name.secure.ssl.client.auth": "requested",
            "listener.name.secure.ssl.truststore.type": "PEM",
            "listener.name.secure.ssl.truststore.location": str(self.ca_path),
            "listener.name.oauth.sasl.enabled.mechanisms": "OAUTHBEARER",
            # KIP-368: the broker ends an OAUTHBEARER session at the token's expiry or
            # after this long; a client that does not re-authenticate (aiokafka) is
            # disconnected and must reconnect with a fresh token - token refresh, tested
            # in seconds.
            "listener.name.oauth.oauthbearer.connections.max.reauth.ms": str(OAUTH_REAUTH_MS),
            # The broker side of unsecured JWTs: Kafka's default OAUTHBEARER server
            # callback is the unsecured validator; the login module needs a subject.
            "listener.name.oauth.oauthbearer.sasl.jaas.config": (
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule "
                'required unsecuredLoginStringClaim_sub="admin";'
            ),
        }

    def ssl_context(self) -> ssl.SSLContext:
        """A client context that trusts the throwaway CA (hostname checked: 127.0.0.1)."""
        return ssl.create_default_context(cafile=str(self.ca_path))

    def client_properties(self, user: str) -> str:
        """A Java-style ``client.properties`` for ``user`` (``aiogroup --command-config``)."""
        return (
            "security.protocol=SASL_SSL\n"
            f"sasl.mechanism={SCRAM_MECHANISM}\n"
            "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule "
            f'required username="{user}" password="{self.passwords[user]}";\n'
            f"ssl.ca.location={self.ca_path}\n"
        )


def unsecured_jwt(subject: str, lifetime_s: float = 3600.0) -> str:
    """An unsecured JWT (``alg: none``) as Kafka's unsecured validator accepts it."""

    def part(obj: Mapping[str, Any]) -> str:
        raw = json.dumps(obj, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    now = time.time()
    claims = {"sub": subject, "iat": int(now), "exp": int(now + lifetime_s), "scope": ""}
    return f"{part({'alg': 'none'})}.{part(claims)}."


class UnsecuredJwtProvider(AbstractTokenProvider):  # type: ignore[misc]
    """aiokafka's token provider interface, handing out unsecured JWTs for ``subject``.

    Counts the tokens it made (``issued``) so a test can see a refresh happen.
    """

    def __init__(self, subject: str, lifetime_s: float = 3600.0) -> None:
        self.subject = subject
        self.lifetime_s = lifetime_s
        self.issued = 0
        #: The last token handed out (a test scans logs for it).
        self.last: str | None = None

    async def token(self) -> str:
        self.issued += 1
        self.last = unsecured_jwt(self.subject, self.lifetime_s)
        return self.last

    def extensions(self) -> dict[str, str]:
        return {}

    def __repr__(self) -> str:
        return f"UnsecuredJwtProvider(subject={self.subject!r}, issued={self.issued})"


# -- ACLs over the administrative (super user) listener ------------------------------


async def _acl_request(bootstrap_servers: str, request: Any) -> None:
    from aiokafka.client import AIOKafkaClient

    from aiogroup.errors import error_for_code

    client = AIOKafkaClient(bootstrap_servers=bootstrap_servers, request_timeout_ms=10_000)
    await client.bootstrap()
    try:
        node = next(iter(client.cluster.brokers())).nodeId
        response = await client.send(node, request)
    finally:
        await client.close()
    rows = getattr(response, "creation_responses", None) or getattr(
        response, "filter_responses", []
    )
    for row in rows:
        if row[0]:
            raise RuntimeError(f"ACL change refused: {error_for_code(row[0]).__name__} {row[1]}")


async def grant(
    admin_bootstrap: str,
    principal: str,
    resource_type: int,
    name: str,
    operation: int,
    *,
    prefixed: bool = False,
) -> None:
    """Allow ``principal`` (``User:alice``) ``operation`` on a resource (an ACL)."""
    await _change_acl(True, admin_bootstrap, principal, resource_type, name, operation, prefixed)


async def revoke(
    admin_bootstrap: str,
    principal: str,
    resource_type: int,
    name: str,
    operation: int,
    *,
    prefixed: bool = False,
) -> None:
    """Remove the ACL :func:`grant` made (takes effect at the next request checked)."""
    await _change_acl(False, admin_bootstrap, principal, resource_type, name, operation, prefixed)


async def _change_acl(
    create: bool,
    admin_bootstrap: str,
    principal: str,
    resource_type: int,
    name: str,
    operation: int,
    prefixed: bool,
) -> None:
    """One CreateAcls or DeleteAcls request (both carry the same ALLOW binding)."""
    from aiokafka.protocol.admin import CreateAclsRequest, DeleteAclsRequest

    request = CreateAclsRequest if create else DeleteAclsRequest
    pattern = _PREFIXED if prefixed else _LITERAL
    await _acl_request(
        admin_bootstrap,
        request(resource_type, name, pattern, principal, "*", operation, _ALLOW),
    )
