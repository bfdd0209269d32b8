"""Secrets never leave the process: which options are secret, and how they print.

Why a module of its own: credentials pass through three places that print things -
the configuration (its repr ends up in log lines, debuggers and crash reports), the
error messages that echo a bad value, and aiokafka's DEBUG log, which prints every
request it sends, SaslAuthenticate included (PLAIN's bytes are ``\\0user\\0password``,
OAUTHBEARER's carry the token).  Redacting at those sources means no caller has to
remember to.
"""

from __future__ import annotations

import logging

__all__ = ["REDACTED", "SECRET_OPTIONS", "install_log_redaction", "is_secret", "redact"]

#: Options whose value is, or can yield, a credential.  ``sasl_oauth_token_provider``
#: is an object the application wrote, whose own repr may hold a token, so only its
#: type is shown; ``ssl_context`` holds key material once ``load_cert_chain`` ran.
SECRET_OPTIONS = frozenset(
    {"sasl_plain_password", "sasl_oauth_token_provider", "ssl_context", "ssl_password"}
)

#: Words that make any option name secret, whatever else it says: the Java client's
#: ``ssl.key.password``/``ssl.truststore.password``, ``sasl.jaas.config`` (it holds the
#: password), a ``sasl.oauthbearer`` token, and names no list here foresaw.  Matched
#: against the name's parts split at ``.``, ``_`` and ``-``.
_SECRET_WORDS = frozenset({"password", "passwd", "secret", "token", "jaas", "credentials"})

#: What a secret value prints as.
REDACTED = "***"


def is_secret(name: str) -> bool:
    """Whether an option called ``name`` (aiokafka's or Java's spelling) holds a secret."""
    lowered = name.lower()
    if lowered in SECRET_OPTIONS:
        return True
    return not _SECRET_WORDS.isdisjoint(lowered.replace(".", "_").replace("-", "_").split("_"))


def redact(name: str, value: object) -> str:
    """``repr(value)``, or a placeholder naming only the type when ``name`` is a secret."""
    if value is None or not is_secret(name):
        return repr(value)
    if isinstance(value, str):
        return repr(REDACTED)
    return f"<{type(value).__name__} {REDACTED}>"


#: Wire structs whose fields carry credentials (SASL exchanges), by class-name prefix.
_SECRET_STRUCTS = ("SaslAuthenticateRequest", "SaslAuthenticateResponse")
#: aiokafka's loggers that print request and response structs.
_STRUCT_LOGGERS = ("aiokafka.conn", "aiokafka.client")


class _SaslStructFilter(logging.Filter):
    """Replaces a SaslAuthenticate struct among a record's arguments by its name alone.

    The record is still emitted (the exchange happened, and seeing it is useful); only
    the bytes are gone.  ``getMessage`` is not called here: formatting stays lazy.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and any(_is_secret_struct(a) for a in args):
            record.args = tuple(
                f"{type(a).__name__}({REDACTED})" if _is_secret_struct(a) else a for a in args
            )
        return True


def _is_secret_struct(value: object) -> bool:
    return type(value).__name__.startswith(_SECRET_STRUCTS)


_FILTER = _SaslStructFilter("aiogroup.redaction")


def install_log_redaction() -> None:
    """Attach the SASL filter to aiokafka's loggers (idempotent; the consumer and the CLI
    call it, so an application that turns on DEBUG logging does not log credentials)."""
    for name in _STRUCT_LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
