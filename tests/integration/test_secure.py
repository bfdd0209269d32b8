"""Secure clusters end to end on Apache Kafka (issue 30): SASL_SSL with SCRAM-SHA-512 (and
PLAIN), OAUTHBEARER, and the StandardAuthorizer's ACLs.

One secured node for the module (``secure_kafka``, aiogroup.testing.secure).  Judged from
outside: committed offsets and group membership are read over the fixture's own
administrative listener, never taken from the member.  Each test is seconds.

Apache Kafka only: the embedded Tansu fixture has no TLS, SASL or authorizer
(``caps.supports_secure_listeners``), so in the Tansu tier the module reports itself not
applicable; the Apache Kafka tier runs it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import logging
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import (
    GroupAuthorizationFailedError,
    GroupCoordinatorNotAvailableError,
    KafkaConnectionError,
    TopicAuthorizationFailedError,
)

from aiogroup import GroupConsumer, TopicPartition
from aiogroup.cli import Admin, CliError, run
from aiogroup.testing.broker import KafkaBroker, unique_name
from aiogroup.testing.history import HistoryRecorder, check_history
from aiogroup.testing.kafka import KafkaCluster
from aiogroup.testing.observer import GroupObserver, describe_consumer_group
from aiogroup.testing.recording import CommitObserver, RecordingListener, record_commits
from aiogroup.testing.secure import (
    AclOperation,
    ResourceType,
    SecureSetup,
    UnsecuredJwtProvider,
    grant,
    revoke,
)

pytestmark = [pytest.mark.integration]

RECORDS = 30
PARTITIONS = 3
#: What "promptly" means for a refused connection or a refused member.
PROMPT_S = 10.0
PROTOCOLS = ["classic", "consumer"]


@dataclasses.dataclass
class Secured:
    cluster: KafkaCluster
    #: A topic alice and carol may read (RECORDS records over PARTITIONS partitions).
    topic: str
    #: A topic nobody but the super users may read.
    closed_topic: str

    @property
    def admin(self) -> str:
        return self.cluster.bootstrap_servers

    def password(self, user: str) -> str:
        assert self.cluster.security is not None
        return self.cluster.security.passwords[user]


async def _prepare(cluster: KafkaCluster) -> Secured:
    topic = await cluster.create_topic(unique_name("sec-open"), PARTITIONS)
    closed = await cluster.create_topic(unique_name("sec-closed"), 1)
    producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap_servers, linger_ms=2)
    await producer.start()
    try:
        for i in range(RECORDS):
            await producer.send(topic, f"r{i}".encode(), partition=i % PARTITIONS)
        await producer.send_and_wait(closed, b"x")
    finally:
        await producer.stop()
    for user in ("User:alice", "User:carol"):
        await grant(cluster.bootstrap_servers, user, ResourceType.TOPIC, topic, AclOperation.READ)
        await grant(
            cluster.bootstrap_servers,
            user,
            ResourceType.GROUP,
            "ok-",
            AclOperation.READ,
            prefixed=True,
        )
    return Secured(cluster, topic, closed)


@pytest.fixture(scope="module")
def secured(kafka_broker: KafkaBroker, request: pytest.FixtureRequest) -> Iterator[Secured]:
    if not kafka_broker.caps.supports_secure_listeners:
        pytest.skip(
            "not applicable: the embedded Tansu fixture runs without TLS, SASL or an "
            "authorizer (caps.supports_secure_listeners); the Apache Kafka tier runs these"
        )
    cluster: KafkaCluster = request.getfixturevalue("secure_kafka")
    yield asyncio.run(_prepare(cluster))


def _member(secured: Secured, user: str, group: str, protocol: str, **extra: Any) -> GroupConsumer:
    topic = extra.pop("topic", secured.topic)
    options: dict[str, Any] = dict(secured.cluster.client_options(user))
    options.update(extra)
    timing = (
        {"session_timeout_ms": 6000, "heartbeat_interval_ms": 500} if protocol == "classic" else {}
    )
    return GroupConsumer(
        topic,
        group_id=group,
        group_protocol=protocol,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        **timing,
        **options,
    )


async def _drain(members: list[GroupConsumer], want: int) -> dict[TopicPartition, int]:
    """Poll every member until ``want`` records arrived in all; the next offset per partition."""
    positions: dict[TopicPartition, int] = {}
    got = 0
    deadline = time.monotonic() + 30
    while got < want:
        assert time.monotonic() < deadline, f"{got} of {want} records in 30s"
        for m in members:
            batch = await m.getmany(timeout_ms=200)
            for tp, records in batch.items():
                got += len(records)
                positions[tp] = records[-1].offset + 1
    return positions


async def _can_read_group(secured: Secured, user: str, group: str) -> bool | None:
    """Whether ``user`` may read ``group`` now (an OffsetFetch as that user): ACL changes
    reach the broker's authorizer through the metadata log, a moment after the answer.
    None: no answer yet (a new group's coordinator can be unavailable for a moment)."""
    options = dict(secured.cluster.client_options(user))
    bootstrap = str(options.pop("bootstrap_servers"))
    try:
        async with Admin(bootstrap, **options) as admin:
            await admin.committed(group)
    except (CliError, GroupAuthorizationFailedError):
        return False
    except GroupCoordinatorNotAvailableError:
        return None
    return True


async def _until(secured: Secured, user: str, group: str, readable: bool) -> None:
    deadline = time.monotonic() + PROMPT_S
    while await _can_read_group(secured, user, group) is not readable:
        assert time.monotonic() < deadline, f"ACL change not in effect after {PROMPT_S}s"
        await asyncio.sleep(0.05)


async def _committed(secured: Secured, group: str) -> dict[TopicPartition, int]:
    async with Admin(secured.admin) as admin:
        return await admin.committed(group)


def _scan(secret: str, *texts: str) -> None:
    for text in texts:
        assert secret not in text


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_group_over_sasl_ssl_consumes_and_commits(
    secured: Secured, protocol: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Two members (SCRAM-SHA-512 over TLS) share the topic, consume every record and
    commit; the broker's view: all offsets committed, both members in the group.  Every
    connection the members opened is on the SASL_SSL listener, and the password is in no
    log line (DEBUG), repr, metrics or health."""
    group = unique_name("ok-group")
    members = [_member(secured, "alice", group, protocol, client_id=f"m{i}") for i in range(2)]
    caplog.set_level(logging.DEBUG)
    try:
        await asyncio.gather(*(m.start() for m in members))
        await _drain(members, RECORDS)
        if protocol == "classic":
            async with Admin(secured.admin) as admin:
                described = await admin.describe(group)
            assert len(described.members) == 2 and described.state == "Stable"
        else:
            async with Admin(secured.admin) as admin:
                sample = await describe_consumer_group(admin.client, group)
            assert len(sample.members) == 2
        for m in members:
            await m.commit()
            conns = list(m._client._conns.values())  # type: ignore[union-attr]
            assert conns and all(
                c._port == secured.cluster.nodes[0].secure_port
                and c._security_protocol == "SASL_SSL"
                for c in conns
            ), [(c._port, c._security_protocol) for c in conns]
            _scan(
                secured.password("alice"),
                repr(m.config),
                repr(m.metrics()),
                repr(m.health()),
            )
    finally:
        await asyncio.gather(*(m.stop() for m in members))
    committed = await _committed(secured, group)
    assert committed == {TopicPartition(secured.topic, p): RECORDS // PARTITIONS for p in range(3)}
    _scan(secured.password("alice"), caplog.text)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_secure_group_is_judged_from_outside_by_the_observer(
    secured: Secured, protocol: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The group observer and the commit observer reach the group over SASL_SSL with the
    members' own options (alice: READ on the group implies the DESCRIBE they need).  The
    observer sees both members join and get partitions, and no eviction; the checker,
    fed the members' deliveries and commits and the broker's view, finds every record
    delivered once, committed, and no violation."""
    group = unique_name("ok-observed")
    history = HistoryRecorder()
    caplog.set_level(logging.DEBUG)
    security = dict(secured.cluster.client_options("alice"))
    bootstrap = str(security.pop("bootstrap_servers"))
    names = ["sec-m0", "sec-m1"]
    members = {
        name: _member(
            secured,
            "alice",
            group,
            protocol,
            client_id=name,
            listener=RecordingListener(history.member(name)),
        )
        for name in names
    }
    for name, member in members.items():
        record_commits(member, history.member(name))
    observer = GroupObserver(bootstrap, group, history, interval=0.2, protocol=protocol, **security)
    got = 0
    try:
        async with observer, CommitObserver(bootstrap, group, history, **security) as commits:
            await asyncio.gather(*(m.start() for m in members.values()))

            def formed() -> bool:
                """The broker shows each member holding partitions (a Stable group)."""
                holding = {e.member for e in history.events() if e.kind == "broker_assignment"}
                return holding >= set(names)

            deadline = time.monotonic() + 30
            # Until every record is in and the broker's view shows the group formed:
            # one member can drain the topic before the other's share reaches it.
            while got < RECORDS or not formed():
                assert time.monotonic() < deadline, f"{got} of {RECORDS} records in 30s"
                for name, member in members.items():
                    batch = await member.getmany(timeout_ms=200)
                    for tp, records in batch.items():
                        history.member(name).delivered(
                            tp.topic, tp.partition, [r.offset for r in records]
                        )
                        got += len(records)
                        await member.commit({tp: records[-1].offset + 1})
            await observer.sampled()
            await commits.read()
            client = observer._client
            assert client is not None
            conns = list(client._conns.values())
            assert conns and all(c._security_protocol == "SASL_SSL" for c in conns)
            for name, member in members.items():
                history.member(name).leaving()
                await member.stop()
    finally:
        await asyncio.gather(*(m.stop() for m in members.values()))
    events = history.events()
    joined = {e.member for e in events if e.kind == "joined"}
    assert joined == set(names), joined
    # The broker's view of the formed group: its last word before anyone left (after
    # the first member leaves, the other may be handed its partitions and be seen so).
    last_seen: dict[str, tuple[tuple[str, int], ...]] = {}
    for e in events:
        if e.kind == "leaving":
            break
        if e.kind == "broker_assignment":
            last_seen[e.member] = e.partitions
    assert all(last_seen.get(name) for name in names), last_seen
    owned = [p for parts in last_seen.values() for p in parts]
    assert sorted(owned) == [(secured.topic, p) for p in range(PARTITIONS)], last_seen
    assert observer.samples > 0
    report = check_history(
        events,
        produced={TopicPartition(secured.topic, p): RECORDS // PARTITIONS for p in range(3)},
    )
    report.assert_clean()
    assert report.evictions == [] and report.fences == [], report.summary()
    assert report.records_checked == RECORDS
    _scan(secured.password("alice"), caplog.text)


async def test_plain_password_is_redacted_from_aiokafkas_debug_log(
    secured: Secured, caplog: pytest.LogCaptureFixture
) -> None:
    """PLAIN sends the password itself in SaslAuthenticate, which aiokafka logs at DEBUG."""
    caplog.set_level(logging.DEBUG)
    member = _member(secured, "alice", unique_name("ok-plain"), "classic", sasl_mechanism="PLAIN")
    try:
        await member.start()
        await _drain([member], RECORDS)
    finally:
        await member.stop()
    assert "SaslAuthenticateRequest" in caplog.text, "the exchange was logged (redacted)"
    _scan(secured.password("alice"), caplog.text)


async def test_oauthbearer_member_consumes_and_its_token_is_not_logged(
    secured: Secured, caplog: pytest.LogCaptureFixture
) -> None:
    """OAUTHBEARER with unsecured JWTs (carol): the member consumes; the token it sent
    appears in no log line (aiokafka logs the SaslAuthenticate bytes at DEBUG)."""
    caplog.set_level(logging.DEBUG)
    provider = UnsecuredJwtProvider("carol")
    member = GroupConsumer(
        secured.topic,
        bootstrap_servers=secured.cluster.oauth_bootstrap_servers,
        group_id=unique_name("ok-oauth"),
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="OAUTHBEARER",
        sasl_oauth_token_provider=provider,
    )
    try:
        await member.start()
        await _drain([member], RECORDS)
        config_text = repr(member.config)
    finally:
        await member.stop()
    assert provider.issued >= 1 and provider.last is not None
    _scan(provider.last, caplog.text, config_text)


async def test_oauth_tokens_expire_under_a_long_lived_member_and_nothing_is_lost(
    secured: Secured,
) -> None:
    """Tokens live 2 s and the broker ends OAUTHBEARER sessions after 2 s (KIP-368);
    aiokafka does not re-authenticate, so the broker closes its connections and it
    reconnects with a fresh token.  Over ~6 s the member stays in the group, no error
    reaches the application, and every record produced meanwhile is delivered once, in
    order."""
    topic = await secured.cluster.create_topic(unique_name("sec-token"), 1)
    group = unique_name("ok-token")
    await grant(secured.admin, "User:carol", ResourceType.TOPIC, topic, AclOperation.READ)
    provider = UnsecuredJwtProvider("carol", lifetime_s=2.0)
    member = GroupConsumer(
        topic,
        bootstrap_servers=secured.cluster.oauth_bootstrap_servers,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="OAUTHBEARER",
        sasl_oauth_token_provider=provider,
    )
    producer = AIOKafkaProducer(bootstrap_servers=secured.admin, linger_ms=0)
    await producer.start()
    produced = 0
    offsets: list[int] = []
    try:
        await member.start()
        began = time.monotonic()
        while time.monotonic() - began < 6.0:
            await producer.send_and_wait(topic, str(produced).encode())
            produced += 1
            batch = await member.getmany(timeout_ms=100)
            offsets += [r.offset for records in batch.values() for r in records]
            await asyncio.sleep(0.05)
        deadline = time.monotonic() + PROMPT_S
        while len(offsets) < produced and time.monotonic() < deadline:
            batch = await member.getmany(timeout_ms=200)
            offsets += [r.offset for records in batch.values() for r in records]
        await member.commit()
        assert member.health().joined
    finally:
        await member.stop()
        await producer.stop()
    assert offsets == list(range(produced)), (produced, offsets[:5], len(offsets))
    assert provider.issued >= 3, provider.issued  # reconnected with fresh tokens
    assert await _committed(secured, group) == {TopicPartition(topic, 0): produced}


async def test_cli_with_command_config_describes_the_group(
    secured: Secured, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert secured.cluster.security is not None
    group = unique_name("ok-cli")
    member = _member(secured, "alice", group, "classic")
    properties = tmp_path / "client.properties"
    properties.write_text(secured.cluster.security.client_properties("alice"))
    out = io.StringIO()
    try:
        await member.start()
        await _drain([member], RECORDS)
        await member.commit()
        argv = ["-b", secured.cluster.secure_bootstrap_servers, "--command-config", str(properties)]
        assert await run([*argv, "--json", "describe", group], out=out) == 0
        described = json.loads(out.getvalue())
        assert described["state"] == "Stable" and len(described["members"]) == 1
        out.truncate(0)
        out.seek(0)
        assert await run([*argv, "--json", "lag", group], out=out) == 0
        assert {row["lag"] for row in json.loads(out.getvalue())} == {0}
    finally:
        await member.stop()
    captured = capsys.readouterr()
    _scan(secured.password("alice"), out.getvalue(), captured.out, captured.err)


async def test_cli_with_a_wrong_password_says_so(
    secured: Secured, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert secured.cluster.security is not None
    properties = tmp_path / "client.properties"
    right = secured.password("alice")
    properties.write_text(
        secured.cluster.security.client_properties("alice").replace(right, "wrong-pw-123")
    )
    argv = ["-b", secured.cluster.secure_bootstrap_servers, "--command-config", str(properties)]
    began = time.monotonic()
    assert await run([*argv, "groups"], out=io.StringIO()) == 1
    assert time.monotonic() - began < PROMPT_S
    err = capsys.readouterr().err
    assert "authentication failed for user 'alice'" in err
    _scan("wrong-pw-123", err)
    _scan(right, err)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_member_without_read_on_its_group_is_refused_at_start(
    secured: Secured, protocol: str
) -> None:
    group = unique_name("no-acl-group")
    member = _member(secured, "alice", group, protocol)
    began = time.monotonic()
    with pytest.raises(GroupAuthorizationFailedError) as caught:
        await asyncio.wait_for(member.start(), PROMPT_S)
    assert time.monotonic() - began < PROMPT_S
    assert f"group {group!r}" in str(caught.value) and "READ" in str(caught.value)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_member_without_read_on_the_topic_is_refused_at_start(
    secured: Secured, protocol: str
) -> None:
    member = _member(
        secured, "alice", unique_name("ok-closed"), protocol, topic=secured.closed_topic
    )
    with pytest.raises(TopicAuthorizationFailedError) as caught:
        await asyncio.wait_for(member.start(), PROMPT_S)
    assert repr(secured.closed_topic) in str(caught.value) and "READ" in str(caught.value)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_acl_revoked_under_a_running_member_refuses_the_commit_and_loses_nothing(
    secured: Secured, protocol: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The group's READ is revoked after a first commit: the next commit raises (the
    committed offsets stay as they were) and the member's next poll raises at once;
    polling on, each poll raises again but the log says each refusal once (the member
    retries it; it used to warn ten times a second); granted again, a new member resumes
    from the last accepted commit and reads the rest."""
    caplog.set_level(logging.WARNING, logger="aiogroup")
    group = unique_name("revoked")
    admin = secured.admin
    await grant(admin, "User:alice", ResourceType.GROUP, group, AclOperation.READ)
    await _until(secured, "alice", group, readable=True)
    member = _member(secured, "alice", group, protocol)
    try:
        await member.start()
        positions = await _drain([member], RECORDS)
        first = {tp: offset - 5 for tp, offset in positions.items()}
        await member.commit(first)
        await revoke(admin, "User:alice", ResourceType.GROUP, group, AclOperation.READ)
        await _until(secured, "alice", group, readable=False)
        with pytest.raises(GroupAuthorizationFailedError, match=group):
            await member.commit()
        began = time.monotonic()
        with pytest.raises(GroupAuthorizationFailedError, match=group):
            while time.monotonic() - began < PROMPT_S:
                await member.getmany(timeout_ms=200)
        refusals = 0
        began = time.monotonic()
        while time.monotonic() - began < 3.0:
            try:
                await member.getmany(timeout_ms=200)
            except GroupAuthorizationFailedError:
                refusals += 1
    finally:
        await member.stop()
    assert refusals >= 2  # each poll is told, not just the first
    warned = Counter(
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and "not authorized for group" in r.getMessage()
    )
    assert warned and max(warned.values()) == 1, warned
    assert await _committed(secured, group) == first
    await grant(admin, "User:alice", ResourceType.GROUP, group, AclOperation.READ)
    await _until(secured, "alice", group, readable=True)
    again = _member(secured, "alice", group, protocol)
    try:
        await again.start()
        resumed = await _drain([again], 5 * PARTITIONS)
    finally:
        await again.stop()
    assert resumed == positions


async def test_wrong_password_fails_promptly_and_says_so(secured: Secured) -> None:
    member = _member(
        secured, "alice", unique_name("ok-wrong"), "classic", sasl_plain_password="not-it"
    )
    began = time.monotonic()
    with pytest.raises(KafkaConnectionError) as caught:
        await asyncio.wait_for(member.start(), PROMPT_S)
    assert time.monotonic() - began < PROMPT_S
    assert "authentication failed for user 'alice'" in str(caught.value)
    assert "not-it" not in str(caught.value) and secured.password("alice") not in str(caught.value)


@pytest.mark.parametrize("protocol", ["PLAINTEXT", "SASL_PLAINTEXT"])
async def test_plaintext_client_on_the_tls_port_fails_promptly(
    secured: Secured, protocol: str
) -> None:
    options: dict[str, Any] = {"security_protocol": protocol, "ssl_context": None}
    if protocol == "PLAINTEXT":
        options.update(sasl_plain_username=None, sasl_plain_password=None, sasl_mechanism="PLAIN")
    member = _member(secured, "alice", unique_name("ok-plain"), "classic", **options)
    began = time.monotonic()
    with pytest.raises(KafkaConnectionError, match="SSL or SASL_SSL"):
        await asyncio.wait_for(member.start(), PROMPT_S)
    assert time.monotonic() - began < PROMPT_S


async def test_mutual_tls_from_the_spark_source_options(secured: Secured, tmp_path: Path) -> None:
    """A PEM keystore given as the Spark source takes it (``kafka.ssl.keystore.location``:
    the key and its chain in one file) becomes a context the SECURE listener accepts as a
    client certificate; that listener verifies any certificate it is given, so one from
    another CA is refused at the handshake, promptly and saying so."""
    from aiogroup.spark.options import parse_options

    security = secured.cluster.security
    assert security is not None and security.client_keystore_path is not None
    group = unique_name("ok-mtls")

    def member_with(keystore: Path) -> GroupConsumer:
        options = parse_options(
            {
                "kafka.bootstrap.servers": secured.cluster.secure_bootstrap_servers,
                "kafka.group.id": group,
                "subscribe": secured.topic,
                "kafka.security.protocol": "SASL_SSL",
                "kafka.sasl.mechanism": "SCRAM-SHA-512",
                "kafka.sasl.jaas.config": (
                    "org.apache.kafka.common.security.scram.ScramLoginModule required "
                    f'username="alice" password="{secured.password("alice")}";'
                ),
                "kafka.ssl.truststore.location": str(security.ca_path),
                "kafka.ssl.truststore.type": "PEM",
                "kafka.ssl.keystore.location": str(keystore),
                "kafka.ssl.keystore.type": "PEM",
            }
        )
        context = options.ssl_context()
        assert context is not None
        return _member(secured, "alice", group, "classic", ssl_context=context)

    member = member_with(security.client_keystore_path)
    try:
        await member.start()
        positions = await _drain([member], RECORDS)
    finally:
        await member.stop()
    assert sum(positions.values()) == RECORDS

    foreign = SecureSetup.create(tmp_path / "foreign-ca")
    assert foreign.client_keystore_path is not None
    stranger = member_with(foreign.client_keystore_path)
    began = time.monotonic()
    with pytest.raises(KafkaConnectionError) as caught:
        await asyncio.wait_for(stranger.start(), PROMPT_S)
    assert time.monotonic() - began < PROMPT_S
    assert "does the broker trust the CA that signed it?" in str(caught.value)
    assert secured.password("alice") not in str(caught.value)
