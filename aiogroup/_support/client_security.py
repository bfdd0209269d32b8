"""A Kafka client's connection security: which options describe it, and building them.

Why a module of its own: four places open Kafka connections from user settings - the
consumer, the CLI's admin client, the Spark source (driver and executors) and the test
observers - and they must agree on what the security options are, how a bad one is
refused, and how a TLS context is made.  Two spellings reach here: aiokafka's keyword
arguments (``security_protocol``, ``ssl_context``, ``sasl_*``), and the strings of
Java-style client properties (``sasl.jaas.config``, PEM file paths) that the CLI's
``--command-config`` and Spark's ``kafka.*`` options carry.  A string cannot carry an
``ssl.SSLContext``, so :class:`TlsFiles` holds the file paths, travels (it pickles),
and makes the context where the client is made.

Errors name the option and never echo a secret value (``aiogroup._support.redaction``).
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aiogroup._support.redaction import redact
from aiogroup.errors import ConfigurationError

__all__ = [
    "PROTOCOLS",
    "SECURITY_OPTION_DEFAULTS",
    "TlsFiles",
    "check_security_options",
    "jaas_credentials",
]

#: aiokafka client keyword arguments that secure a connection, with aiokafka's defaults.
SECURITY_OPTION_DEFAULTS: dict[str, Any] = {
    "security_protocol": "PLAINTEXT",
    "ssl_context": None,
    "sasl_mechanism": "PLAIN",
    "sasl_plain_username": None,
    "sasl_plain_password": None,
    "sasl_kerberos_service_name": "kafka",
    "sasl_kerberos_domain_name": None,
    "sasl_oauth_token_provider": None,
}

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "GSSAPI", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
_STRINGS = (
    "sasl_plain_username",
    "sasl_plain_password",
    "sasl_kerberos_service_name",
    "sasl_kerberos_domain_name",
)


def check_security_options(owner: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """The options that differ from aiokafka's defaults, checked; ``owner`` names the
    caller in the error (``GroupObserver got unknown option(s): ...``)."""
    unknown = sorted(set(options) - set(SECURITY_OPTION_DEFAULTS))
    if unknown:
        raise ConfigurationError(
            f"{owner} got unknown option(s): {', '.join(map(repr, unknown))} (security "
            f"options: {', '.join(SECURITY_OPTION_DEFAULTS)})"
        )
    given = {k: v for k, v in options.items() if v != SECURITY_OPTION_DEFAULTS[k]}
    for name, choices in (("security_protocol", PROTOCOLS), ("sasl_mechanism", SASL_MECHANISMS)):
        if name in given and given[name] not in choices:
            raise ConfigurationError(
                f"{name} must be one of {', '.join(choices)}, got {given[name]!r}"
            )
    for name in _STRINGS:
        if name in given and given[name] is not None and not isinstance(given[name], str):
            raise ConfigurationError(
                f"{name} must be a str or None, got {redact(name, given[name])} "
                f"({type(given[name]).__name__})"
            )
    context = given.get("ssl_context")
    if context is not None and not isinstance(context, ssl.SSLContext):
        raise ConfigurationError(
            f"ssl_context must be an ssl.SSLContext, got {type(context).__name__}"
        )
    protocol = given.get("security_protocol", "PLAINTEXT")
    if protocol.endswith("SSL") and context is None:
        raise ConfigurationError(
            f"security_protocol {protocol} needs an ssl_context "
            "(ssl.create_default_context(cafile=...))"
        )
    return given


# -- JAAS (``sasl.jaas.config``) -----------------------------------------------------------

_JAAS_MODULES = ("PlainLoginModule", "ScramLoginModule")
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;"]+))')


def jaas_credentials(text: str, option: str = "sasl.jaas.config") -> tuple[str, str]:
    """``username``/``password`` of a PLAIN or SCRAM ``sasl.jaas.config``.

    Errors name the problem and ``option``, never the value (it holds the password).
    """
    module = text.split(None, 1)[0] if text.strip() else ""
    if not module.endswith(_JAAS_MODULES):
        shown = module if "=" not in module else "(unreadable)"
        raise ConfigurationError(
            f"{option}: login module {shown!r} is not supported; use "
            "org.apache.kafka.common.security.plain.PlainLoginModule or "
            "org.apache.kafka.common.security.scram.ScramLoginModule"
        )
    options = {
        m.group(1): (m.group(2) if m.group(2) is not None else m.group(3))
        for m in _JAAS_OPTION.finditer(text)
    }
    missing = [k for k in ("username", "password") if k not in options]
    if missing:
        raise ConfigurationError(f"{option} has no {' or '.join(missing)}")
    return options["username"].replace('\\"', '"'), options["password"].replace('\\"', '"')


# -- TLS from files --------------------------------------------------------------------------


@dataclass(frozen=True)
class TlsFiles:
    """A TLS client context described by PEM file paths: picklable, comparable, and
    built by :meth:`context` on whichever machine makes the client.

    ``None`` for ``cafile`` means the system's trust store (as the Java client falls
    back to the JVM's).  ``names`` maps each field to the option the user spelt it
    with, so an error names ``kafka.ssl.truststore.location`` rather than ``cafile``.
    """

    cafile: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    password: str | None = field(default=None, repr=False)
    check_hostname: bool = True
    names: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.keyfile is not None and self.certfile is None:
            raise ConfigurationError(
                f"{self.name('keyfile')} is set without {self.name('certfile')}: a private "
                "key is only used with its client certificate"
            )
        if self.password is not None and self.certfile is None:
            raise ConfigurationError(
                f"{self.name('password')} is set without {self.name('certfile')}: it "
                "decrypts the client certificate's private key"
            )

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{name}={redact('ssl_password' if name == 'password' else name, value)}"
            for name, value in (
                ("cafile", self.cafile),
                ("certfile", self.certfile),
                ("keyfile", self.keyfile),
                ("password", self.password),
                ("check_hostname", self.check_hostname),
            )
        )
        return f"TlsFiles({shown})"

    def name(self, field_name: str) -> str:
        """The option ``field_name`` was given as (for messages)."""
        return dict(self.names).get(field_name, field_name)

    def context(self) -> ssl.SSLContext:
        """A client context: the CAs trusted, the client certificate loaded, hostname
        checked unless told not to.  A file that cannot be read or parsed raises
        :class:`ConfigurationError` naming the option (the ssl module's reason names
        the failure, never the password)."""
        try:
            context = ssl.create_default_context(cafile=self.cafile)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigurationError(
                f"{self.name('cafile')} {self.cafile!r}: cannot load the CA certificate(s) as "
                f"PEM: {_reason(exc)}"
            ) from None
        if self.certfile is not None:
            try:
                context.load_cert_chain(self.certfile, self.keyfile, self.password)
            except (OSError, ssl.SSLError) as exc:
                what = self.name("certfile")
                if self.keyfile is not None:
                    what += f"/{self.name('keyfile')}"
                raise ConfigurationError(
                    f"{what}: cannot load the client certificate and key as PEM: "
                    f"{_reason(exc)} (an encrypted key needs {self.name('password')})"
                ) from None
        if not self.check_hostname:
            context.check_hostname = False
        return context


def _reason(exc: OSError | ssl.SSLError) -> str:
    return f"{type(exc).__name__}: {exc.strerror or exc}"
