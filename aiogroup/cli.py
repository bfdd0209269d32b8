"""``aiogroup``: a consumer-group admin CLI (as ``kafka-consumer-groups.sh``).

    aiogroup [--bootstrap-servers HOST:PORT] [--command-config FILE] [--json] groups
    aiogroup ... describe GROUP
    aiogroup ... lag GROUP [--watch SECONDS] [--iterations N]
    aiogroup ... reset GROUP [--topic T ...] (--to-earliest | --to-latest |
                 --to-datetime ISO8601 | --shift-by N) [--dry-run | --execute]
    aiogroup ... share describe GROUP
    aiogroup ... share reset GROUP [--topic T ...] (--to-earliest | --to-latest |
                 --to-datetime ISO8601) [--dry-run | --execute]
    aiogroup ... share delete GROUP --topic T [--topic T ...] [--dry-run | --execute]

Share groups (KIP-932) have no committed offsets: each share-partition has a *start
offset* below which every record is settled (accepted, rejected or archived), and a
lag (records at or past it not yet settled; DescribeShareGroupOffsets v1).  ``share
describe`` shows members, their (shared) assignment, start offsets and lag; ``share
reset`` moves start offsets (AlterShareGroupOffsets) and ``share delete`` forgets a
topic's share state (DeleteShareGroupOffsets), both only while the group has no
members, as the broker demands.  ``describe`` names a share group's members too, and
``reset`` refuses a share group (use ``share reset``).

Lag and ``--to-latest`` use each partition's **high watermark** (``offsets.end_offsets``:
ListOffsets(latest) confirmed by a Fetch), not ListOffsets(latest) alone: on Kafka the
two agree, but the embedded Tansu broker answers ListOffsets(latest) with the last
batch's base offset, which makes lag negative and ``--to-latest`` land inside the last
batch.

``lag`` also shows a processor's progress (``aiogroup.processing``): ``finished_ahead``
counts the records past the committed offset that its commit metadata lists as
finished (a new owner skips them), and ``unprocessed`` is the lag less those.

``reset`` is a dry run unless ``--execute`` is given, and refuses while the group
has members (their commits would race the reset, as the Java tool refuses too).
Exit status: 0 on success, 1 on a refused or failed operation, 2 on bad usage.

Secure clusters: ``--command-config client.properties`` takes the Java-style client
properties Kafka's own tools take (:data:`SUPPORTED_PROPERTIES`; a key outside it is
refused by name), or the equivalent flags (``--security-protocol``,
``--sasl-mechanism``, ``--sasl-username``, ``--ssl-ca-location``; the password only
from the file or ``$AIOGROUP_SASL_PASSWORD``, never a flag, which ``ps`` would show).
Trust is PEM (``ssl.ca.location`` as librdkafka names it, or a PEM truststore): a JKS
or PKCS12 truststore is refused with the command that converts it.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import logging
import os
import re
import ssl
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import IncompatibleBrokerVersion, KafkaConnectionError

from aiogroup._fetch import offset_lookups as _offsets
from aiogroup._protocol.classic_embedded import decode_assignment
from aiogroup._protocol.consumer_group import (
    ConsumerGroupDescribeRequest,
    parse_consumer_group_describe,
)
from aiogroup._protocol.group import (
    OffsetCommitRequest,
    OffsetFetchRequest,
    parse_offset_commit,
    parse_offset_fetch,
)
from aiogroup._protocol.share_admin import (
    AlterShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsRequest,
    DescribedShareGroup,
    DescribeShareGroupOffsetsRequest,
    ShareGroupDescribeRequest,
    ShareOffsetsResult,
    ShareStartOffset,
    parse_alter_share_group_offsets,
    parse_delete_share_group_offsets,
    parse_describe_share_group_offsets,
    parse_share_group_describe,
)
from aiogroup._support.bootstrap_errors import explain_bootstrap_failure
from aiogroup._support.client_security import TlsFiles, jaas_credentials
from aiogroup._support.redaction import install_log_redaction
from aiogroup._support.timeouts import wait_for
from aiogroup.errors import ConfigurationError, KafkaError, error_for_code
from aiogroup.processing.offset_metadata import decode
from aiogroup.structs import OffsetAndMetadata, TopicPartition

__all__ = ["main", "run"]

log = logging.getLogger("aiogroup.cli")

TIMEOUT_S = 30.0
#: Group states in which nobody can commit over a reset.
_IDLE_STATES = ("Empty", "Dead")


class CliError(Exception):
    """A refused or failed operation: printed without a traceback, exit status 1."""


#: ConsumerGroupDescribe's answer for a group that is not a consumer-protocol group.
GROUP_ID_NOT_FOUND = 69


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: list[str]
    #: The member epoch of a consumer-protocol (KIP-848) member; None for classic ones.
    member_epoch: int | None = None


@dataclass
class GroupDescription:
    group: str
    state: str
    protocol_type: str
    protocol: str
    members: list[Member]


@dataclass
class PartitionLag:
    topic: str
    partition: int
    committed: int | None
    high_watermark: int | None
    lag: int | None
    #: Records past the committed offset that a processor (``aiogroup.processing``) had
    #: already finished when it committed, read from the commit's metadata; a new owner
    #: skips them.  0 for commits without that metadata (other clients, plain commits).
    finished_ahead: int = 0
    #: ``lag`` less ``finished_ahead``: what is left to process (None with ``lag``).
    unprocessed: int | None = None


class Admin:
    """The few group operations the CLI needs, over aiokafka's admin client."""

    def __init__(self, bootstrap: str, **client_options: Any) -> None:
        # Every request below goes through this one client (the admin's, the
        # coordinator's OffsetFetch/OffsetCommit, ListOffsets and Fetch for watermarks),
        # so the security options reach every connection the CLI opens.
        options = {"client_id": "aiogroup-cli", **client_options}
        self.admin = AIOKafkaAdminClient(
            bootstrap_servers=bootstrap, request_timeout_ms=20_000, **options
        )
        self._bootstrap = bootstrap
        self._security = {k: v for k, v in client_options.items() if k != "client_id"}

    async def __aenter__(self) -> Admin:
        try:
            await self.admin.start()
        except KafkaConnectionError as exc:  # "Unable to bootstrap": say why
            raise await explain_bootstrap_failure(self._bootstrap, self._security, exc) from exc
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.admin.close()

    @property
    def client(self) -> Any:
        return self.admin._client

    async def groups(self) -> list[dict[str, str]]:
        found = await self.admin.list_consumer_groups()
        return sorted(({"group": g[0], "protocol_type": g[1]} for g in found), key=str)

    async def describe(self, group: str) -> GroupDescription:
        """The group as its coordinator sees it, whichever protocol it speaks.

        DescribeGroups knows classic groups only: Kafka answers it for a
        consumer-protocol (KIP-848) group, or for no group at all, with state Dead.
        Then ConsumerGroupDescribe is asked; a group neither call knows is an error.
        """
        classic = await self._describe_classic(group)
        if classic.state != "Dead":
            return classic
        described = await self._describe_consumer_group(group)
        if described is not None:
            return described
        shared = await self.describe_share_group(group, missing_ok=True)
        if shared is not None:
            members = [
                Member(
                    m.member_id,
                    None,
                    m.client_id,
                    m.client_host,
                    [f"{t}-{p}" for t, p in sorted(m.assignment)],
                    m.member_epoch,
                )
                for m in shared.members
            ]
            return GroupDescription(
                group, shared.group_state, "share", shared.assignor_name, members
            )
        raise CliError(f"group {group!r} not found (no classic, consumer-protocol or share group)")

    async def describe_share_group(
        self, group: str, *, missing_ok: bool = False
    ) -> DescribedShareGroup | None:
        """ShareGroupDescribe.  A group that is not a share group is an error naming what
        it is (or None with ``missing_ok``); so is a broker without share groups."""
        try:
            node = await self.admin.find_coordinator(group)
            found = parse_share_group_describe(
                await self.client.send(node, ShareGroupDescribeRequest(group))
            )
        except IncompatibleBrokerVersion as exc:
            if missing_ok:
                return None
            raise CliError(f"share groups are not served by this broker ({exc})") from None
        if found.error_code == GROUP_ID_NOT_FOUND:
            if missing_ok:
                return None
            other = await self._describe_classic(group)
            if other.state == "Dead":
                consumer = await self._describe_consumer_group(group)
                other = consumer if consumer is not None else other
            if other.state != "Dead":
                raise CliError(
                    f"group {group!r} is a {other.protocol_type or 'classic'} group, not a "
                    "share group"
                )
            raise CliError(f"share group {group!r} not found")
        if found.error_code:
            raise CliError(
                f"describe {group}: {_share_error(found.error_code, found.error_message)}"
            )
        return found

    async def share_offsets(self, group: str) -> list[ShareStartOffset]:
        """Every share-partition's start offset and lag (DescribeShareGroupOffsets)."""
        node = await self.admin.find_coordinator(group)
        result = parse_describe_share_group_offsets(
            await self.client.send(node, DescribeShareGroupOffsetsRequest(group))
        )
        if result.error_code:
            raise CliError(
                f"share offsets of {group}: {_share_error(result.error_code, result.error_message)}"
            )
        failed = [r for r in result.rows if r.error_code]
        if failed:
            raise CliError(
                f"share offsets of {group}: "
                + ", ".join(
                    f"{r.topic}-{r.partition}: {_share_error(r.error_code, r.error_message)}"
                    for r in failed
                )
            )
        return sorted(result.rows, key=lambda r: (r.topic, r.partition))

    async def alter_share_offsets(self, group: str, offsets: dict[TopicPartition, int]) -> None:
        by_topic: dict[str, dict[int, int]] = {}
        for tp, offset in offsets.items():
            by_topic.setdefault(tp.topic, {})[tp.partition] = offset
        node = await self.admin.find_coordinator(group)
        result = parse_alter_share_group_offsets(
            await self.client.send(node, AlterShareGroupOffsetsRequest(group, by_topic))
        )
        _raise_share_errors(f"share reset of {group}", result)

    async def delete_share_offsets(self, group: str, topics: Sequence[str]) -> None:
        node = await self.admin.find_coordinator(group)
        result = parse_delete_share_group_offsets(
            await self.client.send(node, DeleteShareGroupOffsetsRequest(group, list(topics)))
        )
        _raise_share_errors(f"share delete of {group}", result)

    async def _describe_consumer_group(self, group: str) -> GroupDescription | None:
        """ConsumerGroupDescribe; None when the group is not a consumer-protocol group
        (GROUP_ID_NOT_FOUND) or the broker does not speak KIP-848 (the embedded one)."""
        try:
            node = await self.admin.find_coordinator(group)
            found = parse_consumer_group_describe(
                await self.client.send(node, ConsumerGroupDescribeRequest(group))
            )
        except (KafkaError, ValueError):  # UnsupportedVersion on a classic-only broker
            return None
        if found.error_code == GROUP_ID_NOT_FOUND:
            return None
        if found.error_code:
            raise CliError(f"describe {group}: {error_for_code(found.error_code).__name__}")
        members = [
            Member(
                m.member_id,
                m.instance_id,
                m.client_id,
                "",
                [f"{topic}-{partition}" for topic, partition in sorted(m.assignment)],
                m.member_epoch,
            )
            for m in found.members
        ]
        return GroupDescription(group, found.group_state, "consumer", found.assignor_name, members)

    async def _describe_classic(self, group: str) -> GroupDescription:
        responses = await self.admin.describe_consumer_groups([group])
        for resp in responses:
            for g in resp.to_object()["groups"]:
                if _pick(g, "group_id", "group") != group:
                    continue
                if g["error_code"]:
                    raise CliError(f"describe {group}: {error_for_code(g['error_code']).__name__}")
                members = []
                for m in g["members"]:
                    parts: list[str] = []
                    if m.get("member_assignment"):
                        try:
                            asg = decode_assignment(m["member_assignment"])
                            parts = [f"{tp.topic}-{tp.partition}" for tp in sorted(asg.partitions)]
                        except KafkaError:
                            parts = ["<undecodable>"]
                    members.append(
                        Member(
                            m["member_id"],
                            m.get("group_instance_id"),
                            m.get("client_id", ""),
                            m.get("client_host", ""),
                            parts,
                        )
                    )
                return GroupDescription(
                    group,
                    _pick(g, "group_state", "state"),
                    g["protocol_type"],
                    _pick(g, "protocol_data", "protocol"),
                    members,
                )
        raise CliError(f"group {group!r} not found")

    async def committed(self, group: str) -> dict[TopicPartition, int]:
        """All of the group's committed offsets (OffsetFetch with partitions=None)."""
        return {tp: offset for tp, (offset, _) in (await self.commits(group)).items()}

    async def commits(self, group: str) -> dict[TopicPartition, tuple[int, str]]:
        """All of the group's committed offsets with their metadata.

        aiogroup's own request class, not aiokafka's ``list_consumer_group_offsets``,
        whose OffsetFetch version fails to decode the embedded broker's answer.
        """
        node = await self.admin.find_coordinator(group)
        result = parse_offset_fetch(await self.client.send(node, OffsetFetchRequest(group, None)))
        if result.error_code:
            raise CliError(f"OffsetFetch {group}: {error_for_code(result.error_code).__name__}")
        return {
            TopicPartition(topic, partition): (row[0], row[2] or "")
            for (topic, partition), row in result.partitions.items()
            if row[0] >= 0 and not row[3]
        }

    async def partitions(self, topics: Sequence[str]) -> list[TopicPartition]:
        await self.client.set_topics(list(topics))
        out: list[TopicPartition] = []
        for topic in topics:
            parts = self.client.cluster.partitions_for_topic(topic)
            if not parts:
                raise CliError(f"topic {topic!r} does not exist")
            out.extend(TopicPartition(topic, p) for p in sorted(parts))
        return out

    async def high_watermarks(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """Each partition's log end: ListOffsets(latest) confirmed by a Fetch's high watermark
        (``aiogroup._fetch.offset_lookups.end_offsets``; see the module docstring)."""
        if not tps:
            return {}
        await self.client.set_topics(sorted({tp.topic for tp in tps}))
        return await _offsets.end_offsets(
            self.client, list(tps), read_committed=False, timeout=TIMEOUT_S
        )

    async def commit(self, group: str, offsets: dict[TopicPartition, int]) -> None:
        """A "simple" commit (generation -1): only an empty group accepts it."""
        node = await self.admin.find_coordinator(group)
        request = OffsetCommitRequest(
            group, -1, "", None, {tp: OffsetAndMetadata(o, "") for tp, o in offsets.items()}
        )
        result = parse_offset_commit(await self.client.send(node, request))
        failed = {k: v for k, v in result.errors.items() if v}
        if failed:
            names = ", ".join(
                f"{t}-{p}: {error_for_code(c).__name__}" for (t, p), c in sorted(failed.items())
            )
            raise CliError(f"commit refused: {names}")


#: Error names of the codes the share admin APIs answer that aiokafka does not know.
_SHARE_ERRORS = {68: "NON_EMPTY_GROUP", 69: "GROUP_ID_NOT_FOUND", 100: "UNKNOWN_TOPIC_ID"}


def _share_error(code: int, message: str | None) -> str:
    name = _SHARE_ERRORS.get(code) or error_for_code(code).__name__
    return f"{name}: {message}" if message else name


def _raise_share_errors(what: str, result: ShareOffsetsResult) -> None:
    if result.error_code == 68:  # NON_EMPTY_GROUP
        raise CliError(f"{what}: the group has members: stop its share consumers first")
    if result.error_code:
        raise CliError(f"{what}: {_share_error(result.error_code, result.error_message)}")
    failed = [r for r in result.rows if r.error_code]
    if failed:
        raise CliError(
            f"{what}: "
            + ", ".join(
                f"{r.topic}{'' if r.partition < 0 else f'-{r.partition}'}: "
                f"{_share_error(r.error_code, r.error_message)}"
                for r in failed
            )
        )


def _pick(obj: dict[str, Any], *names: str) -> Any:
    """The first field present: aiokafka names fields differently across versions."""
    for name in names:
        if name in obj:
            return obj[name]
    raise KeyError(names[0])


# -- client properties (--command-config) ------------------------------------------------

#: The Java client properties ``--command-config`` understands, and what each does.
SUPPORTED_PROPERTIES: dict[str, str] = {
    "security.protocol": "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL",
    "sasl.mechanism": "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512",
    "sasl.jaas.config": "PlainLoginModule or ScramLoginModule with username=... password=...",
    "sasl.username": "librdkafka's name; instead of sasl.jaas.config",
    "sasl.password": "librdkafka's name; instead of sasl.jaas.config",
    "ssl.ca.location": "PEM file of the CA(s) to trust (librdkafka's name)",
    "ssl.truststore.location": "PEM file of the CA(s) to trust; needs ssl.truststore.type=PEM",
    "ssl.truststore.type": "PEM (JKS and PKCS12 are Java-only: convert them)",
    "ssl.truststore.password": "ignored (a PEM truststore has none)",
    "ssl.certificate.location": "PEM client certificate (mutual TLS)",
    "ssl.key.location": "PEM private key of the client certificate",
    "ssl.key.password": "the private key's password",
    "ssl.endpoint.identification.algorithm": "https (the default) or empty: no hostname check",
    "client.id": "the client id the broker logs",
}

_SECRET_PROPERTIES = ("sasl.jaas.config", "sasl.password", "ssl.key.password")
_SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def parse_properties(text: str) -> dict[str, str]:
    """Java ``.properties`` lines: ``key=value``, ``key: value`` or ``key value``;
    ``#``/``!`` comments; a trailing backslash continues a line."""
    props: dict[str, str] = {}
    logical = ""
    for raw in text.splitlines():
        line = raw.strip() if not logical else raw.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            logical += line[:-1]
            continue
        logical += line
        match = re.match(r"([^=:\s]+)\s*[=:\s]\s*(.*)$", logical)
        if match:
            props[match.group(1)] = match.group(2).strip()
        elif logical:
            props[logical] = ""
        logical = ""
    return props


def _jaas_credentials(text: str) -> tuple[str, str]:
    """``username``/``password`` of a PLAIN or SCRAM ``sasl.jaas.config`` (the shared
    parser's errors, which name the problem and never the value, as CliError)."""
    try:
        return jaas_credentials(text)
    except ConfigurationError as exc:
        raise CliError(str(exc)) from None


def client_options_from_properties(props: dict[str, str]) -> dict[str, Any]:
    """aiokafka client keyword arguments for Java-style client ``props``.

    An unsupported key is refused by name (a silently ignored security setting
    would connect with less security than the file asks for).
    """
    unknown = sorted(set(props) - set(SUPPORTED_PROPERTIES))
    if unknown:
        raise CliError(
            f"unsupported client propert{'y' if len(unknown) == 1 else 'ies'}: "
            f"{', '.join(unknown)} (supported: {', '.join(SUPPORTED_PROPERTIES)})"
        )
    opts: dict[str, Any] = {}
    protocol = props.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in _PROTOCOLS:
        raise CliError(f"security.protocol {protocol!r} is not one of {', '.join(_PROTOCOLS)}")
    opts["security_protocol"] = protocol
    if "client.id" in props:
        opts["client_id"] = props["client.id"]
    if protocol.startswith("SASL_"):
        mechanism = props.get("sasl.mechanism", "PLAIN").upper()
        if mechanism not in _SASL_MECHANISMS:
            raise CliError(
                f"sasl.mechanism {mechanism!r} is not supported by the CLI (supported: "
                f"{', '.join(_SASL_MECHANISMS)})"
            )
        opts["sasl_mechanism"] = mechanism
        if "sasl.jaas.config" in props:
            user, password = _jaas_credentials(props["sasl.jaas.config"])
        else:
            user = props.get("sasl.username", "")
            password = props.get("sasl.password", os.environ.get("AIOGROUP_SASL_PASSWORD", ""))
        if not user or not password:
            raise CliError(
                f"security.protocol {protocol} needs a username and password "
                "(sasl.jaas.config, or sasl.username and sasl.password)"
            )
        opts["sasl_plain_username"] = user
        opts["sasl_plain_password"] = password
    if protocol.endswith("SSL"):
        opts["ssl_context"] = _ssl_context(props)
    return opts


def _ssl_context(props: dict[str, str]) -> ssl.SSLContext:
    cafile = props.get("ssl.ca.location")
    names = {"cafile": "ssl.ca.location"}
    if "ssl.truststore.location" in props:
        kind = props.get("ssl.truststore.type", "JKS").upper()
        if kind != "PEM":
            raise CliError(
                f"ssl.truststore.type {kind} is Java-only; export the CA as PEM (keytool "
                "-exportcert -rfc -keystore TRUSTSTORE -alias CA -file ca.pem) and set "
                "ssl.ca.location=ca.pem (or ssl.truststore.type=PEM)"
            )
        cafile = props["ssl.truststore.location"]
        names["cafile"] = "ssl.truststore.location"
    names.update(
        certfile="ssl.certificate.location", keyfile="ssl.key.location", password="ssl.key.password"
    )
    certfile = props.get("ssl.certificate.location")
    try:
        return TlsFiles(
            cafile=cafile,
            certfile=certfile,
            keyfile=props.get("ssl.key.location") if certfile else None,
            password=props.get("ssl.key.password") if certfile else None,
            check_hostname=props.get("ssl.endpoint.identification.algorithm", "https").strip()
            != "",
            names=tuple(sorted(names.items())),
        ).context()
    except ConfigurationError as exc:
        # The message names the option and the failure, not a password.
        raise CliError(f"TLS setup failed: {exc}") from None


def client_options_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The file's properties, overridden by the flags given."""
    props: dict[str, str] = {}
    if args.command_config:
        try:
            text = Path(args.command_config).read_text(encoding="utf-8")
        except OSError as exc:
            raise CliError(f"--command-config {args.command_config}: {exc.strerror}") from None
        props = parse_properties(text)
    for flag, key in (
        ("security_protocol", "security.protocol"),
        ("sasl_mechanism", "sasl.mechanism"),
        ("sasl_username", "sasl.username"),
        ("ssl_ca_location", "ssl.ca.location"),
    ):
        value = getattr(args, flag, None)
        if value is not None:
            props[key] = value
    if "sasl.username" in props and "sasl.jaas.config" in props:
        raise CliError("give either --sasl-username or sasl.jaas.config, not both")
    if not props:
        return {}
    return client_options_from_properties(props)


# -- commands ---------------------------------------------------------------------------


async def cmd_groups(admin: Admin, args: argparse.Namespace) -> Any:
    return await admin.groups()


async def cmd_describe(admin: Admin, args: argparse.Namespace) -> Any:
    return asdict(await admin.describe(args.group))


def finished_ahead(committed: int, metadata: str, high_watermark: int | None) -> int:
    """How many records past ``committed`` a processor's commit metadata lists as finished.

    Only records below the high watermark count (a run cannot end past the log, but a
    truncated log would make it look so); metadata of any other shape counts nothing.
    """
    end = high_watermark if high_watermark is not None else float("inf")
    return sum(max(0, int(min(stop, end)) - start) for start, stop in decode(committed, metadata))


async def lag_rows(admin: Admin, group: str) -> list[PartitionLag]:
    commits = await admin.commits(group)
    committed = {tp: offset for tp, (offset, _) in commits.items()}
    described = await admin.describe(group)
    assigned = set()
    for member in described.members:
        for name in member.assignment:
            topic, _, partition = name.rpartition("-")
            if partition.isdigit():
                assigned.add(TopicPartition(topic, int(partition)))
    tps = sorted(set(committed) | assigned)
    hw = await admin.high_watermarks(tps)
    rows = []
    for tp in tps:
        c, h = committed.get(tp), hw.get(tp)
        # Never negative: a commit past the high watermark (a bad commit, or Tansu's
        # ListOffsets answering below the log end) means nothing is left to read.
        # Kafka's kafka-consumer-groups prints the negative difference; 0 is what a
        # lag alert can use, and consumer.lag() says the same.
        lag = None if c is None or h is None else max(0, h - c)
        ahead = 0 if c is None else finished_ahead(c, commits[tp][1], h)
        unprocessed = None if lag is None else max(0, lag - ahead)
        rows.append(PartitionLag(tp.topic, tp.partition, c, h, lag, ahead, unprocessed))
    return rows


async def cmd_lag(admin: Admin, args: argparse.Namespace) -> Any:
    if args.watch is None:
        return [asdict(r) for r in await lag_rows(admin, args.group)]
    out: TextIO = args.out
    n = 0
    while args.iterations is None or n < args.iterations:
        rows = await lag_rows(admin, args.group)
        stamp = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        if args.json:
            print(json.dumps({"time": stamp, "partitions": [asdict(r) for r in rows]}), file=out)
        else:
            if out.isatty():
                out.write("\x1b[H\x1b[2J")  # a live display: redraw in place
            print(
                f"group {args.group} at {stamp} (every {args.watch:g}s, Ctrl-C to stop)", file=out
            )
            print(_table([asdict(r) for r in rows]), file=out)
        out.flush()
        n += 1
        if args.iterations is None or n < args.iterations:
            await asyncio.sleep(args.watch)
    return None


def _parse_datetime(text: str) -> int:
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise CliError(
            f"--to-datetime {text!r} is not ISO 8601 (e.g. 2026-11-23T15:00:00Z)"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return int(when.timestamp() * 1000)


async def cmd_reset(admin: Admin, args: argparse.Namespace) -> Any:
    described = await admin.describe(args.group)
    if described.protocol_type == "share":
        raise CliError(
            f"group {args.group!r} is a share group: it has start offsets, not committed "
            f"ones (use `aiogroup share reset {args.group}`)"
        )
    if described.state not in _IDLE_STATES or described.members:
        raise CliError(
            f"group {args.group!r} is {described.state} with {len(described.members)} "
            "member(s): stop its consumers first (a reset would race their commits)"
        )
    committed = await admin.committed(args.group)
    if args.topic:
        tps = await admin.partitions(args.topic)
    else:
        tps = sorted(committed)
    if not tps:
        raise CliError(f"group {args.group!r} has no committed offsets; name --topic")
    earliest = await _offsets.beginning_offsets(admin.client, tps, timeout=TIMEOUT_S)
    latest = await admin.high_watermarks(tps)
    targets: dict[TopicPartition, int] = {}
    if args.to_earliest:
        targets = dict(earliest)
    elif args.to_latest:
        targets = dict(latest)
    elif args.to_datetime is not None:
        targets = await _offsets_at(admin, tps, args.to_datetime, latest)
    else:
        for tp in tps:
            base = committed.get(tp, earliest[tp])
            targets[tp] = min(max(base + args.shift_by, earliest[tp]), latest[tp])
    rows = _reset_rows(tps, committed, targets)
    if args.execute:
        await admin.commit(args.group, targets)
    return {"group": args.group, "executed": bool(args.execute), "partitions": rows}


async def _offsets_at(
    admin: Admin, tps: Sequence[TopicPartition], when: str, latest: dict[TopicPartition, int]
) -> dict[TopicPartition, int]:
    """Each partition's first offset at or after ISO 8601 ``when``; the end when none."""
    ts = _parse_datetime(when)
    found = await _offsets.offsets_for_times(
        admin.client, dict.fromkeys(tps, ts), read_committed=False, timeout=TIMEOUT_S
    )
    targets = {}
    for tp in tps:
        hit = found[tp]
        # No record at or after the time: the end.  The embedded broker says so with
        # offset 0 and timestamp -1 instead of Kafka's -1 offset; a real match always
        # has a timestamp, so both read as "none".
        targets[tp] = latest[tp] if hit is None or hit.timestamp < 0 else int(hit.offset)
    return targets


def _reset_rows(
    tps: Sequence[TopicPartition],
    current: dict[TopicPartition, int],
    targets: dict[TopicPartition, int],
) -> list[dict[str, Any]]:
    return [
        {
            "topic": tp.topic,
            "partition": tp.partition,
            "current": current.get(tp),
            "new": targets[tp],
        }
        for tp in tps
    ]


# -- share groups (KIP-932) ------------------------------------------------------------------


async def _require_empty_share_group(admin: Admin, group: str, what: str) -> None:
    described = await admin.describe_share_group(group)
    assert described is not None
    if described.members:
        raise CliError(
            f"share group {group!r} is {described.group_state} with {len(described.members)} "
            f"member(s): stop its share consumers first (the broker refuses to {what} a "
            "share group with members)"
        )


async def cmd_share_describe(admin: Admin, args: argparse.Namespace) -> Any:
    described = await admin.describe_share_group(args.group)
    assert described is not None
    rows = await admin.share_offsets(args.group)
    return {
        "group": args.group,
        "state": described.group_state,
        "assignor": described.assignor_name,
        "group_epoch": described.group_epoch,
        "members": [
            {
                "member_id": m.member_id,
                "client_id": m.client_id,
                "host": m.client_host,
                "member_epoch": m.member_epoch,
                "assignment": [f"{t}-{p}" for t, p in sorted(m.assignment)],
            }
            for m in described.members
        ],
        "partitions": [
            {
                "topic": r.topic,
                "partition": r.partition,
                "start_offset": r.start_offset,
                "lag": r.lag,
            }
            for r in rows
        ],
    }


async def cmd_share_reset(admin: Admin, args: argparse.Namespace) -> Any:
    await _require_empty_share_group(admin, args.group, "reset the start offsets of")
    current = {
        TopicPartition(r.topic, r.partition): r.start_offset
        for r in await admin.share_offsets(args.group)
    }
    tps = await admin.partitions(args.topic) if args.topic else sorted(current)
    if not tps:
        raise CliError(f"share group {args.group!r} has no start offsets yet; name --topic")
    targets: dict[TopicPartition, int]
    if args.to_earliest:
        targets = dict(await _offsets.beginning_offsets(admin.client, tps, timeout=TIMEOUT_S))
    elif args.to_latest:
        targets = await admin.high_watermarks(tps)
    else:
        targets = await _offsets_at(admin, tps, args.to_datetime, await admin.high_watermarks(tps))
    rows = _reset_rows(tps, current, targets)
    if args.execute:
        await admin.alter_share_offsets(args.group, targets)
    return {"group": args.group, "executed": bool(args.execute), "partitions": rows}


async def cmd_share_delete(admin: Admin, args: argparse.Namespace) -> Any:
    await _require_empty_share_group(admin, args.group, "delete the offsets of")
    have = sorted({r.topic for r in await admin.share_offsets(args.group)})
    missing = sorted(set(args.topic) - set(have))
    if missing:
        raise CliError(
            f"share group {args.group!r} has no state for topic(s) {', '.join(missing)} "
            f"(it has: {', '.join(have) or 'none'})"
        )
    if args.execute:
        await admin.delete_share_offsets(args.group, args.topic)
    return {"group": args.group, "executed": bool(args.execute), "topics": sorted(args.topic)}


SHARE_COMMANDS = {
    "describe": cmd_share_describe,
    "reset": cmd_share_reset,
    "delete": cmd_share_delete,
}


async def cmd_share(admin: Admin, args: argparse.Namespace) -> Any:
    return await SHARE_COMMANDS[args.share_command](admin, args)


COMMANDS = {
    "groups": cmd_groups,
    "describe": cmd_describe,
    "lag": cmd_lag,
    "reset": cmd_reset,
    "share": cmd_share,
}


# -- output ---------------------------------------------------------------------------------


def _table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "(none)"
    cols = list(rows[0])
    cells = [[("-" if r[c] is None else str(r[c])) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(cols, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(lines)


def _render(command: str, result: Any) -> str:
    if command == "share":
        return _render_share(result)
    if command == "describe":
        head = (
            f"group {result['group']}: state {result['state']}, "
            f"protocol {result['protocol_type']}/{result['protocol'] or '-'}, "
            f"{len(result['members'])} member(s)"
        )
        members = [{**m, "assignment": ",".join(m["assignment"]) or "-"} for m in result["members"]]
        return head + ("\n" + _table(members) if members else "")
    if command == "reset":
        verb = "reset" if result["executed"] else "would reset (dry run; --execute to apply)"
        return f"group {result['group']}: {verb}\n" + _table(result["partitions"])
    return _table(result)


def _render_share(result: dict[str, Any]) -> str:
    if "state" in result:
        head = (
            f"share group {result['group']}: state {result['state']}, assignor "
            f"{result['assignor'] or '-'}, {len(result['members'])} member(s)"
        )
        members = [{**m, "assignment": ",".join(m["assignment"]) or "-"} for m in result["members"]]
        parts = [head]
        if members:
            parts.append(_table(members))
        parts.append(_table(result["partitions"]))
        return "\n".join(parts)
    if "topics" in result:
        verb = "deleted" if result["executed"] else "would delete (dry run; --execute to apply)"
        return f"share group {result['group']}: {verb} the state of {', '.join(result['topics'])}"
    verb = "reset" if result["executed"] else "would reset (dry run; --execute to apply)"
    return f"share group {result['group']}: {verb}\n" + _table(result["partitions"])


# -- entry points ---------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="aiogroup", description="Inspect and manage Kafka consumer groups."
    )
    parser.add_argument(
        "--bootstrap-servers",
        "-b",
        default=os.environ.get("AIOGROUP_BOOTSTRAP", "localhost:9092"),
        help="host:port[,host:port] (default: $AIOGROUP_BOOTSTRAP or localhost:9092)",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument(
        "--command-config",
        metavar="FILE",
        help="Java-style client properties (security.protocol, sasl.*, ssl.*) for a secure "
        "cluster, as Kafka's own tools take",
    )
    parser.add_argument("--security-protocol", choices=_PROTOCOLS)
    parser.add_argument("--sasl-mechanism", choices=_SASL_MECHANISMS)
    parser.add_argument(
        "--sasl-username", help="the password comes from $AIOGROUP_SASL_PASSWORD or the file"
    )
    parser.add_argument("--ssl-ca-location", metavar="PEM", help="CA certificate(s) to trust")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("groups", help="list consumer groups")
    p = sub.add_parser("describe", help="state, protocol, members and their assignment")
    p.add_argument("group")
    p = sub.add_parser("lag", help="committed offset vs high watermark per partition")
    p.add_argument("group")
    p.add_argument("--watch", type=float, metavar="SECONDS", help="redraw every SECONDS")
    p.add_argument("--iterations", type=int, help="with --watch: stop after N redraws")
    p = sub.add_parser("reset", help="reset committed offsets (dry run unless --execute)")
    p.add_argument("group")
    p.add_argument("--topic", action="append", help="topic to reset (repeatable)")
    to = p.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true", help="to the high watermark")
    to.add_argument("--to-datetime", metavar="ISO8601")
    to.add_argument("--shift-by", type=int, metavar="N", help="committed + N (clamped)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", default=True, help="the default")
    mode.add_argument("--execute", action="store_true")
    _share_parser(sub)
    return parser


def _share_parser(sub: Any) -> None:
    share = sub.add_parser("share", help="share groups (KIP-932): describe, reset, delete")
    cmds = share.add_subparsers(dest="share_command", required=True)
    p = cmds.add_parser("describe", help="members, assignment, start offsets and lag")
    p.add_argument("group")
    p = cmds.add_parser("reset", help="move start offsets (dry run unless --execute)")
    p.add_argument("group")
    p.add_argument("--topic", action="append", help="topic to reset (repeatable)")
    to = p.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true", help="to the high watermark")
    to.add_argument("--to-datetime", metavar="ISO8601")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", default=True, help="the default")
    mode.add_argument("--execute", action="store_true")
    p = cmds.add_parser("delete", help="forget topics' share state (dry run unless --execute)")
    p.add_argument("group")
    p.add_argument("--topic", action="append", required=True, help="topic (repeatable)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", default=True, help="the default")
    mode.add_argument("--execute", action="store_true")


async def run(argv: Sequence[str], out: TextIO | None = None) -> int:
    """Run the CLI in the current event loop; returns the exit status."""
    out = out or sys.stdout
    try:
        args = build_parser().parse_args(list(argv))
    except SystemExit as exc:
        return int(exc.code or 0)
    args.out = out
    install_log_redaction()
    try:
        client_options = client_options_from_args(args)
        async with Admin(args.bootstrap_servers, **client_options) as admin:
            result = await wait_for(
                COMMANDS[args.command](admin, args),
                None if args.command == "lag" and args.watch else TIMEOUT_S * 2,
            )
    except CliError as exc:
        print(f"aiogroup: {exc}", file=sys.stderr)
        return 1
    except KafkaConnectionError as exc:
        print(f"aiogroup: {args.command} failed: {exc}", file=sys.stderr)
        return 1
    except (KafkaError, OSError, asyncio.TimeoutError) as exc:
        print(f"aiogroup: {args.command} failed: {exc!r}", file=sys.stderr)
        return 1
    if result is not None:
        text = json.dumps(result, indent=2) if args.json else _render(args.command, result)
        print(text, file=out)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return asyncio.run(run(sys.argv[1:] if argv is None else argv))
    except KeyboardInterrupt:
        return 130
