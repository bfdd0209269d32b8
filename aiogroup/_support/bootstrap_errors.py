"""Why a bootstrap failed, in words: authentication, TLS, or the wrong listener.

Why: aiokafka's ``bootstrap()`` logs each host's error and raises only "Unable to
bootstrap from [...]", so a wrong password, an untrusted certificate and a plaintext
client on a TLS port all read the same.  On that failure (and only then) one host is
dialled again with the same security options, and the cause it meets becomes the
message.  The message names the user and the mechanism, never a password or token.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Mapping
from typing import Any

from aiokafka.conn import create_conn
from aiokafka.errors import KafkaConnectionError

from aiogroup._support.timeouts import wait_for

__all__ = ["explain_bootstrap_failure"]

#: How long the diagnosing connection may take (a hang is itself the diagnosis).
PROBE_TIMEOUT_S = 10.0


def _first_host(bootstrap_servers: str | list[str]) -> tuple[str, int]:
    hosts = (
        bootstrap_servers.split(",") if isinstance(bootstrap_servers, str) else bootstrap_servers
    )
    host, _, port = hosts[0].strip().rpartition(":")
    return (host or hosts[0].strip(), int(port) if port.isdigit() else 9092)


async def explain_bootstrap_failure(
    bootstrap_servers: str | list[str],
    client_options: Mapping[str, Any],
    original: BaseException,
) -> KafkaConnectionError:
    """A ``KafkaConnectionError`` whose message says why ``original`` happened."""
    host, port = _first_host(bootstrap_servers)
    protocol = str(client_options.get("security_protocol", "PLAINTEXT"))
    cause: BaseException | None = None
    try:
        conn = await wait_for(
            create_conn(
                host, port, request_timeout_ms=int(PROBE_TIMEOUT_S * 1000), **client_options
            ),
            PROBE_TIMEOUT_S,
        )
        conn.close()
    except asyncio.TimeoutError as exc:
        cause = exc
    except Exception as exc:
        cause = exc
    where = f"{host}:{port} ({protocol})"
    if cause is None:
        text = f"could not bootstrap from {bootstrap_servers}, though {where} answers now"
    else:
        text = f"could not connect to {where}: {_reason(cause, protocol, client_options)}"
    error = KafkaConnectionError(text)
    error.__cause__ = cause if cause is not None else original
    return error


def _reason(cause: BaseException, protocol: str, options: Mapping[str, Any]) -> str:
    errno = getattr(cause, "errno", None)
    mechanism = options.get("sasl_mechanism", "PLAIN")
    if errno == 58:  # SASL_AUTHENTICATION_FAILED
        user = options.get("sasl_plain_username")
        who = f"user {user!r}" if user else "the client"
        return (
            f"authentication failed for {who} with SASL mechanism {mechanism} (check the "
            f"username and password): {_broker_text(cause)}"
        )
    if errno == 33:  # UNSUPPORTED_SASL_MECHANISM
        return f"the listener does not offer SASL mechanism {mechanism}: {_broker_text(cause)}"
    if isinstance(cause, ssl.SSLCertVerificationError):
        return (
            f"TLS certificate verification failed ({cause.verify_message}): the ssl_context "
            "must trust the CA that signed the broker's certificate"
        )
    if isinstance(cause, ssl.SSLError):
        hint = " (is this a plaintext listener? then security_protocol PLAINTEXT or SASL_PLAINTEXT)"
        return f"TLS handshake failed: {cause.reason or cause}{hint}"
    if isinstance(cause, asyncio.TimeoutError):
        return f"no answer within {PROBE_TIMEOUT_S:g}s (a TLS listener answered in plaintext?)"
    if isinstance(cause, ConnectionRefusedError):
        return "connection refused (nothing listens there)"
    if isinstance(cause, KafkaConnectionError) and not protocol.endswith("SSL"):
        return (
            f"the broker closed the connection at once ({cause}): if this listener expects "
            "TLS, use security_protocol SSL or SASL_SSL with an ssl_context"
        )
    if isinstance(cause, KafkaConnectionError) and protocol.startswith("SASL"):
        hints = [f"does the listener expect SASL {mechanism}?"]
        if protocol.endswith("SSL"):
            hints.append(_CLIENT_CERTIFICATE_HINT)
        return f"{cause} ({'; '.join(hints)})"
    if isinstance(cause, KafkaConnectionError) and protocol.endswith("SSL"):
        return f"{cause} ({_CLIENT_CERTIFICATE_HINT})"
    return f"{type(cause).__name__}: {cause}"


#: A broker that verifies client certificates (``ssl.client.auth``) closes the connection
#: right after a TLS 1.3 handshake the client saw succeed: no alert reaches the reason.
_CLIENT_CERTIFICATE_HINT = (
    "if the ssl_context presents a client certificate, does the broker trust the CA that signed it?"
)


def _broker_text(cause: BaseException) -> str:
    text = str(cause)
    return text.split(": ", 1)[1] if text.startswith("[Error") and ": " in text else text
