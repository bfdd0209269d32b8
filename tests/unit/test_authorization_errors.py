"""Authorization refusals name the group or topic and the missing ACL (issue 30);
failed bootstraps say why (wrong password, plaintext to TLS) without a secret."""

from __future__ import annotations

import asyncio
import ssl

import pytest
from aiokafka.errors import (
    GroupAuthorizationFailedError,
    KafkaConnectionError,
    SaslAuthenticationFailed,
    TopicAuthorizationFailedError,
)

from aiogroup._support.bootstrap_errors import _reason
from aiogroup.errors import authorization_error, is_authorization_error


def test_group_refusal_names_the_group_and_read() -> None:
    exc = authorization_error(30, group_id="orders", during="Heartbeat")
    assert isinstance(exc, GroupAuthorizationFailedError)
    assert "group 'orders'" in str(exc) and "READ" in str(exc) and "Heartbeat" in str(exc)
    assert is_authorization_error(exc)


def test_topic_refusal_names_each_topic_and_the_group() -> None:
    exc = authorization_error(29, group_id="g", topics=["b", "a", "a"])
    assert isinstance(exc, TopicAuthorizationFailedError)
    assert "topic 'a', 'b'" in str(exc) and "READ" in str(exc) and "group 'g'" in str(exc)


def test_other_errors_are_not_authorization_errors() -> None:
    assert not is_authorization_error(KafkaConnectionError("x"))
    assert not is_authorization_error(ValueError())


def test_bootstrap_reasons_name_the_cause_never_the_password() -> None:
    options = {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "alice",
        "sasl_plain_password": "hunter2-secret",
    }
    text = _reason(SaslAuthenticationFailed("invalid credentials"), "SASL_SSL", options)
    assert "authentication failed for user 'alice'" in text and "SCRAM-SHA-512" in text
    assert "hunter2-secret" not in text
    closed = _reason(KafkaConnectionError("Connection closed"), "PLAINTEXT", {})
    assert "use security_protocol SSL or SASL_SSL" in closed
    verify = ssl.SSLCertVerificationError("x")
    verify.verify_message = "unable to get local issuer certificate"
    assert "must trust the CA" in _reason(verify, "SSL", {})
    assert "no answer within" in _reason(asyncio.TimeoutError(), "SSL", {})
    # A broker that verifies client certificates closes the connection after a TLS 1.3
    # handshake the client saw succeed: both likely causes are named.
    closed_tls = _reason(KafkaConnectionError("Connection closed"), "SASL_SSL", options)
    assert "does the listener expect SASL SCRAM-SHA-512?" in closed_tls
    assert "does the broker trust the CA that signed it?" in closed_tls
    assert "does the broker trust the CA" in _reason(KafkaConnectionError("closed"), "SSL", {})
    assert "trust the CA" not in _reason(KafkaConnectionError("closed"), "SASL_PLAINTEXT", {})


# -- the classic member's shell, over the scripted broker of test_coordinator_shell ------


def test_a_subscribed_topic_metadata_marks_unauthorized_is_reported_once() -> None:
    """Was a silent empty assignment: the topic is just absent from metadata."""
    from tests.unit.test_coordinator_shell import joined, run_virtual

    async def scenario() -> None:
        coordinator, sub, broker, _ = await joined()
        broker.cluster.unauthorized_topics = {"t", "other"}  # type: ignore[attr-defined]
        broker.cluster.changed()
        error = sub.pending_error
        assert isinstance(error, TopicAuthorizationFailedError)
        assert "topic 't'" in str(error) and "'other'" not in str(error)
        assert "READ" in str(error) and "group 'g'" in str(error)
        with pytest.raises(TopicAuthorizationFailedError):
            sub.raise_pending_error()
        broker.cluster.changed()  # the same refusal again: not reported twice
        assert sub.pending_error is None
        broker.cluster.unauthorized_topics = set()  # type: ignore[attr-defined]
        broker.cluster.changed()
        assert sub.pending_error is None
        await coordinator.close(timeout=5)

    run_virtual(scenario())


def test_a_commit_the_authorizer_refuses_names_the_group_and_read() -> None:
    from aiogroup.structs import OffsetAndMetadata
    from tests.unit.test_coordinator_shell import TP0, C, joined, run_virtual

    async def scenario() -> None:
        coordinator, _, broker, _ = await joined()
        broker.script["OffsetCommit"] = [C.GROUP_AUTHORIZATION_FAILED]
        with pytest.raises(GroupAuthorizationFailedError, match=r"group 'g'.*READ"):
            await coordinator.commit_offsets({TP0: OffsetAndMetadata(4, "")}, timeout=30)
        assert ("t", 0) not in broker.committed
        await coordinator.close(timeout=5)

    run_virtual(scenario())
