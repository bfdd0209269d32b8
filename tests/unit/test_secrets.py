"""Secrets never leave the process: a known secret fed through every secret-bearing
option is found in none of repr/str, metrics, health, config errors, DEBUG logs of the
SASL exchange, or the CLI's messages (issue 30).

The pure parts; tests/integration/test_secure.py repeats the log and CLI scan over a
real SASL_SSL connection.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import logging
import ssl
from pathlib import Path
from typing import Any

import pytest
from aiokafka.protocol.admin import SaslAuthenticateRequest_v0, SaslAuthenticateResponse_v0

from aiogroup import GroupConsumer
from aiogroup._support.redaction import REDACTED, install_log_redaction, redact
from aiogroup.cli import (
    CliError,
    _jaas_credentials,
    client_options_from_args,
    client_options_from_properties,
    parse_properties,
    run,
)
from aiogroup.errors import ConfigurationError
from aiogroup.testing.secure import SecureSetup

SECRET = "S3cr3t-Fed-Through-Every-Option"


class TokenProvider:
    """An OAuth token provider whose own repr (a dataclass's, say) shows its token."""

    def __init__(self) -> None:
        self.current = SECRET

    async def token(self) -> str:
        return self.current

    def extensions(self) -> dict[str, str]:
        return {}

    def __repr__(self) -> str:
        return f"TokenProvider(current={self.current!r})"


class KeyedContext(ssl.SSLContext):
    """An SSL context whose repr a careless subclass made show its key password."""

    def __repr__(self) -> str:
        return f"KeyedContext(key_password={SECRET!r})"


def secret_consumers() -> list[GroupConsumer]:
    """One consumer per secret-bearing option (each with the secret in it)."""
    base: dict[str, Any] = {"bootstrap_servers": "127.0.0.1:1", "group_id": "g"}
    return [
        GroupConsumer(
            **base,
            security_protocol="SASL_SSL",
            sasl_mechanism="SCRAM-SHA-512",
            sasl_plain_username="alice",
            sasl_plain_password=SECRET,
        ),
        GroupConsumer(
            **base,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="OAUTHBEARER",
            sasl_oauth_token_provider=TokenProvider(),
        ),
        GroupConsumer(
            **base,
            security_protocol="SSL",
            ssl_context=KeyedContext(ssl.PROTOCOL_TLS_CLIENT),
        ),
    ]


def _texts(consumer: GroupConsumer) -> list[str]:
    return [
        repr(consumer.config),
        str(consumer.config),
        repr(consumer),
        str(consumer),
        repr(consumer.metrics()),
        repr(dataclasses.asdict(consumer.metrics())),
        repr(consumer.health()),
    ]


async def test_secret_is_in_no_repr_metrics_or_health() -> None:
    for consumer in secret_consumers():
        texts = _texts(consumer)
        assert consumer.config.client_options, "the secret option must have been kept"
        for text in texts:
            assert SECRET not in text
        # What is shown instead names the option, so a reader knows it is set.
        assert REDACTED in repr(consumer.config)


def test_secret_still_reaches_the_client() -> None:
    """Redaction is of printing only: the client gets the real value."""
    consumer = secret_consumers()[0]
    assert consumer.config.client_options["sasl_plain_password"] == SECRET


@pytest.mark.parametrize(
    "options",
    [
        {"sasl_plain_password": SECRET.encode()},  # bytes, not str: refused
        {"sasl_plain_password": [SECRET]},
        {"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN", "sasl_plain_password": 7},
    ],
)
def test_config_errors_do_not_echo_a_secret(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError) as caught:
        GroupConsumer(bootstrap_servers="127.0.0.1:1", **options)
    assert "sasl_plain_password" in str(caught.value)  # the error names the option
    assert SECRET not in str(caught.value) and SECRET not in repr(caught.value)


def test_sasl_exchange_in_aiokafkas_debug_log_is_redacted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """aiokafka logs every request struct at DEBUG: PLAIN's bytes are the password."""
    install_log_redaction()
    request = SaslAuthenticateRequest_v0(b"\0alice\0" + SECRET.encode())
    response = SaslAuthenticateResponse_v0(0, None, SECRET.encode())
    conn_log = logging.getLogger("aiokafka.conn")
    with caplog.at_level(logging.DEBUG):
        conn_log.debug("Request to %s:%d %d: %s", "h", 1, 7, request)
        conn_log.debug("Response from %s:%d %d: %s", "h", 1, 7, response)
        conn_log.debug("Request to %s:%d %d: %s", "h", 1, 8, "an ordinary request")
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 3, "records are redacted, not dropped"
    assert all(SECRET not in m for m in messages)
    assert "SaslAuthenticateRequest" in messages[0]
    assert messages[2].endswith("an ordinary request")


def test_log_redaction_is_installed_once() -> None:
    install_log_redaction()
    install_log_redaction()
    names = [type(f).__name__ for f in logging.getLogger("aiokafka.conn").filters]
    assert names.count("_SaslStructFilter") == 1


# -- the CLI's client properties ---------------------------------------------------------

JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    f'username="alice" password="{SECRET}";'
)


def test_properties_parse_java_syntax() -> None:
    text = (
        "# a comment\n! another\nsecurity.protocol = SASL_SSL\nsasl.mechanism:SCRAM-SHA-512\n"
        f"sasl.jaas.config={JAAS[:40]}\\\n    {JAAS[40:]}\nclient.id my-tool\n"
    )
    props = parse_properties(text)
    assert props == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": JAAS,
        "client.id": "my-tool",
    }


def test_jaas_config_gives_username_and_password() -> None:
    assert _jaas_credentials(JAAS) == ("alice", SECRET)
    plain = JAAS.replace("scram.ScramLoginModule", "plain.PlainLoginModule")
    assert _jaas_credentials(plain) == ("alice", SECRET)


def test_properties_become_client_options() -> None:
    opts = client_options_from_properties(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": JAAS,
            "ssl.endpoint.identification.algorithm": "",
        }
    )
    assert opts["security_protocol"] == "SASL_SSL"
    assert opts["sasl_mechanism"] == "SCRAM-SHA-512"
    assert (opts["sasl_plain_username"], opts["sasl_plain_password"]) == ("alice", SECRET)
    assert isinstance(opts["ssl_context"], ssl.SSLContext)
    assert opts["ssl_context"].check_hostname is False


@pytest.mark.parametrize(
    ("props", "fragment"),
    [
        ({"sasl.kerberos.service.name": "kafka"}, "unsupported client property: sasl.kerberos"),
        ({"security.protocol": "TLS"}, "security.protocol 'TLS' is not one of"),
        (
            {"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI", "sasl.jaas.config": JAAS},
            "sasl.mechanism 'GSSAPI' is not supported",
        ),
        (
            {"security.protocol": "SSL", "ssl.truststore.location": "/x.jks"},
            "ssl.truststore.type JKS is Java-only",
        ),
        (
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.jaas.config": f'com.example.Module required password="{SECRET}";',
            },
            "login module 'com.example.Module' is not supported",
        ),
        (
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.jaas.config": JAAS.replace('username="alice" ', ""),
            },
            "sasl.jaas.config has no username",
        ),
        (
            {"security.protocol": "SASL_PLAINTEXT", "sasl.username": "alice"},
            "needs a username and password",
        ),
        (
            {"security.protocol": "SSL", "ssl.ca.location": "/nonexistent/ca.pem"},
            "TLS setup failed",
        ),
    ],
)
def test_bad_properties_are_named_and_never_echo_the_secret(
    props: dict[str, str], fragment: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AIOGROUP_SASL_PASSWORD", raising=False)
    with pytest.raises(CliError, match=fragment) as caught:
        client_options_from_properties(props)
    assert SECRET not in str(caught.value)


def test_flags_override_the_file_and_the_password_comes_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "client.properties"
    path.write_text("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n")
    monkeypatch.setenv("AIOGROUP_SASL_PASSWORD", SECRET)
    args = argparse.Namespace(
        command_config=str(path),
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-256",
        sasl_username="bob",
        ssl_ca_location=None,
    )
    opts = client_options_from_args(args)
    assert opts == {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_plain_username": "bob",
        "sasl_plain_password": SECRET,
    }


async def test_cli_errors_on_a_bad_command_config_never_print_the_secret(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "client.properties"
    path.write_text(
        "security.protocol=SASL_SSL\n"
        f'sasl.jaas.config=com.example.Nope required password="{SECRET}";\n'
    )
    out = io.StringIO()
    code = await run(["--command-config", str(path), "groups"], out=out)
    captured = capsys.readouterr()
    assert code == 1
    assert "login module" in captured.err
    assert SECRET not in captured.err + captured.out + out.getvalue()
    missing = await run(["--command-config", str(tmp_path / "missing"), "groups"], out=out)
    assert missing == 1 and "--command-config" in capsys.readouterr().err


def test_spark_source_options_never_print_the_password() -> None:
    """The Spark source's options (logged by Spark, shipped to executors) hide it."""
    from aiogroup.spark.options import parse_options

    options = parse_options(
        {
            "kafka.bootstrap.servers": "localhost:9092",
            "subscribe": "orders",
            "kafka.group.id": "g",
            "kafka.security.protocol": "SASL_PLAINTEXT",
            "kafka.sasl.mechanism": "PLAIN",
            "kafka.sasl.plain.username": "alice",
            "kafka.sasl.plain.password": "spark-s3cret",
        }
    )
    assert options.consumer_options["sasl_plain_password"] == "spark-s3cret"  # still used
    for text in (repr(options), str(options)):
        assert "spark-s3cret" not in text
        assert "alice" in text  # the rest still prints


def test_any_option_named_like_a_secret_is_redacted() -> None:
    """The Java spellings and names no list foresaw: by the words in the name."""
    for name in (
        "sasl_plain_password",
        "ssl.key.password",
        "ssl.truststore.password",
        "sasl.jaas.config",
        "sasl_oauth_token",
        "client-secret",
        "ssl_context",
    ):
        assert SECRET not in redact(name, SECRET), name
        assert SECRET not in redact(name, KeyedContext(ssl.PROTOCOL_TLS_CLIENT)), name
    for name in ("sasl_plain_username", "ssl_keyfile", "key_deserializer", "client_id"):
        assert redact(name, "shown") == "'shown'", name


@pytest.fixture(scope="module")
def pem(tmp_path_factory: pytest.TempPathFactory) -> SecureSetup:
    return SecureSetup.create(tmp_path_factory.mktemp("tls"))


def _spark_option_sets(pem: SecureSetup) -> list[dict[str, str]]:
    """One Spark option map per secret-bearing ``kafka.*`` option, the secret in it."""
    base = {
        "kafka.bootstrap.servers": "localhost:9093",
        "kafka.group.id": "g",
        "subscribe": "orders",
        "kafka.security.protocol": "SASL_SSL",
        "kafka.ssl.cafile": str(pem.ca_path),
    }
    plain = {"kafka.sasl.plain.username": "alice", "kafka.sasl.plain.password": SECRET}
    return [
        {**base, **plain},
        {**base, "kafka.sasl.jaas.config": JAAS, "kafka.sasl.mechanism": "SCRAM-SHA-512"},
        {
            **base,
            **plain,
            "kafka.ssl.keystore.location": str(pem.keystore_path),
            "kafka.ssl.keystore.type": "PEM",
            "kafka.ssl.key.password": SECRET,
        },
        {
            **base,
            **plain,
            "kafka.ssl.certfile": str(pem.keystore_path),
            "kafka.ssl.password": SECRET,
        },
    ]


def test_spark_source_options_with_every_secret_print_none(pem: SecureSetup) -> None:
    """Spark logs a source's options and ships them to executors: repr/str of the parsed
    options and of their TLS part hide every secret; the secret still reaches the client."""
    from aiogroup.spark.options import parse_options

    for given in _spark_option_sets(pem):
        options = parse_options(given)
        texts = [repr(options), str(options), repr(options.tls), repr(options.consumer_options)]
        secret_used = options.consumer_options.get("sasl_plain_password") == SECRET or (
            options.tls is not None and options.tls.password == SECRET
        )
        assert secret_used, given
        for text in texts[:3]:
            assert SECRET not in text, text
        assert REDACTED in repr(options)


@pytest.mark.parametrize(
    "bad",
    [
        {"kafka.security.protocol": "BOGUS"},
        {"kafka.ssl.truststore.location": "/x.jks"},
        {"kafka.ssl.keystore.password": SECRET},
        {"kafka.ssl.cafile": "/nonexistent.pem"},
        {"kafka.sasl.jaas.config": f'x.Nope required password="{SECRET}";'},
        {"kafka.sasl.mechanism": "OAUTHBEARER"},
        {"kafka.ssl.keyfile": "/k.pem"},
    ],
)
def test_spark_option_errors_never_echo_the_secret(pem: SecureSetup, bad: dict[str, str]) -> None:
    from aiogroup.spark.options import parse_options

    for given in _spark_option_sets(pem):
        with pytest.raises(ConfigurationError) as caught:
            parse_options({**given, **bad})
        assert "kafka." in str(caught.value)  # names the option
        assert SECRET not in str(caught.value) and SECRET not in repr(caught.value)


def test_observers_take_the_consumers_security_options_and_print_no_secret() -> None:
    """The test tools that judge a group from outside connect as a member would."""
    from aiogroup.testing.history import HistoryRecorder
    from aiogroup.testing.observer import GroupObserver
    from aiogroup.testing.recording import CommitObserver

    history = HistoryRecorder()
    security: dict[str, Any] = {
        "security_protocol": "SASL_SSL",
        "ssl_context": KeyedContext(ssl.PROTOCOL_TLS_CLIENT),
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "alice",
        "sasl_plain_password": SECRET,
    }
    for tool in (
        GroupObserver("127.0.0.1:1", "g", history, **security),
        CommitObserver("127.0.0.1:1", "g", history, **security),
    ):
        assert SECRET not in repr(tool) and SECRET not in str(tool)
        assert tool._security["sasl_plain_password"] == SECRET  # reaches the client


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"sasl_plain_pasword": SECRET}, "unknown option(s): 'sasl_plain_pasword'"),
        ({"security_protocol": "SASL_SSL"}, "needs an ssl_context"),
        ({"security_protocol": "TLS"}, "security_protocol must be one of"),
        ({"sasl_plain_password": SECRET.encode()}, "sasl_plain_password must be a str"),
        ({"security_protocol": "SSL", "ssl_context": SECRET}, "ssl_context must be"),
    ],
)
def test_observer_security_errors_name_the_option_not_the_secret(
    options: dict[str, Any], fragment: str
) -> None:
    from aiogroup.testing.history import HistoryRecorder
    from aiogroup.testing.observer import GroupObserver
    from aiogroup.testing.recording import CommitObserver

    for tool in (GroupObserver, CommitObserver):
        with pytest.raises(ConfigurationError) as caught:
            tool("127.0.0.1:1", "g", HistoryRecorder(), **options)
        assert fragment in str(caught.value)
        assert SECRET not in str(caught.value)
