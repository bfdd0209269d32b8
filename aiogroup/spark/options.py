"""The ``format("aiogroup")`` options: Spark's Kafka-source names, checked once, up front.

Spark builds the data source (and so runs this parser) while the query is being
analysed, so a bad option fails ``load()``/``start()`` with a message naming it
instead of surfacing later from a worker process.  The result is a frozen, picklable
value: Spark ships it to the streaming-source process and to every executor.
"""

from __future__ import annotations

import json
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from aiogroup._support.client_security import (
    PROTOCOLS,
    SASL_MECHANISMS,
    TlsFiles,
    jaas_credentials,
)
from aiogroup._support.redaction import redact
from aiogroup.config import ConsumerConfig, validate_topic_name
from aiogroup.errors import ConfigurationError
from aiogroup.structs import TopicPartition

__all__ = ["DEFAULT_SOURCE_ASSIGNORS", "SourceOptions", "StartingOffsets", "parse_options"]

#: "earliest", "latest", or explicit offsets (-2 earliest, -1 latest) per partition.
StartingOffsets = Literal["earliest", "latest"] | dict[TopicPartition, int]

EARLIEST = -2
LATEST = -1

# Option names are matched case-insensitively (Spark lower-cases them); the spelling
# here is the one used in messages and docs.
_SOURCE_OPTIONS = {
    name.lower(): name
    for name in (
        "subscribe",
        "subscribePattern",
        "startingOffsets",
        "maxOffsetsPerTrigger",
        "maxRecordsPerBatch",
        "failOnDataLoss",
        "includeHeaders",
        "startTimeoutMs",
        "kafkaConsumer.pollTimeoutMs",
    )
}

# Spark's Kafka source options that make no sense for a group member.
_UNSUPPORTED = {
    "assign": "assign is not supported: partitions come from the consumer group; use "
    "subscribe or subscribePattern",
    "endingoffsets": "endingOffsets is for batch queries; use Trigger.AvailableNow for a "
    "bounded streaming run",
    "kafka.auto.offset.reset": "kafka.auto.offset.reset is not supported; use startingOffsets",
    "kafka.enable.auto.commit": "kafka.enable.auto.commit is not supported: the source commits "
    "to the group after Spark commits each batch",
    "kafka.key.deserializer": "kafka.key.deserializer is not supported: key is always BINARY",
    "kafka.value.deserializer": "kafka.value.deserializer is not supported: value is always BINARY",
}

# Consumer settings the source decides itself.
_RESERVED_CONSUMER_OPTIONS = {"auto_offset_reset", "enable_auto_commit"}

_CLIENT_OPTIONS = {
    "security_protocol",
    "sasl_mechanism",
    "sasl_plain_username",
    "sasl_plain_password",
    "sasl_kerberos_service_name",
    "sasl_kerberos_domain_name",
}

# Connection security, without the ``kafka.`` prefix.  Spark's own Kafka source passes
# ``kafka.*`` to the Java client, so its users write the Java names (``sasl.jaas.config``,
# ``ssl.truststore.location``); aiokafka's names (``sasl.plain.username``, ``ssl.cafile``)
# are accepted too.  Any other ``kafka.ssl.*``/``kafka.sasl.*`` key is refused by name:
# a security setting silently ignored would connect with less security than asked for.
_SASL_KEYS = (
    "sasl.mechanism",
    "sasl.jaas.config",
    "sasl.plain.username",
    "sasl.plain.password",
    "sasl.kerberos.service.name",
    "sasl.kerberos.domain.name",
)
#: TLS keys -> the TlsFiles field each fills (None: checked, not a file).
_SSL_KEYS: dict[str, str | None] = {
    "ssl.cafile": "cafile",
    "ssl.certfile": "certfile",
    "ssl.keyfile": "keyfile",
    "ssl.password": "password",
    "ssl.check.hostname": None,
    "ssl.truststore.location": "cafile",
    "ssl.truststore.type": None,
    "ssl.truststore.password": None,
    "ssl.keystore.location": "certfile",
    "ssl.keystore.type": None,
    "ssl.keystore.password": None,
    "ssl.key.password": "password",
    "ssl.endpoint.identification.algorithm": None,
}
_SECURITY_KEYS = ("security.protocol", *_SASL_KEYS, *_SSL_KEYS)

# Options Spark itself may add to every data source's option map.
_IGNORED = {"path"}

_INT = re.compile(r"^-?\d+$")


@dataclass(frozen=True)
class SourceOptions:
    """Everything the source needs, already validated (see ``parse_options``)."""

    bootstrap_servers: str
    group_id: str
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    starting_offsets: StartingOffsets = "latest"
    max_offsets_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    start_timeout_s: float = 120.0
    poll_timeout_s: float = 120.0
    #: Extra GroupConsumer keyword arguments translated from ``kafka.*`` options.
    consumer_options: Mapping[str, Any] = field(default_factory=dict)
    #: SSL or SASL_SSL: the PEM files of ``kafka.ssl.*`` (the system's CAs when none);
    #: the context is built by :meth:`ssl_context` where each client is made.
    tls: TlsFiles | None = None

    def __repr__(self) -> str:
        # Written out (dataclass leaves a class's own __repr__ alone) so that the
        # ``kafka.sasl.plain.password`` a query passes never prints: these options
        # reach Spark's logs and plans, and executors' error reports.
        shown = {
            f.name: getattr(self, f.name) for f in fields(self) if f.name != "consumer_options"
        }
        parts = [f"{name}={value!r}" for name, value in shown.items()]
        options = ", ".join(f"{k!r}: {redact(k, v)}" for k, v in self.consumer_options.items())
        parts.append(f"consumer_options={{{options}}}")
        return f"SourceOptions({', '.join(parts)})"

    def group_consumer_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for the streaming-source process's group member."""
        kwargs = dict(self.consumer_options)
        # Cooperative by default: a query keeps reading the partitions it keeps while
        # another query (or application) joins or leaves the group, instead of every
        # member's micro-batches waiting out an eager rebalance.  A group that also
        # holds eager-only members sets kafka.partition.assignment.strategy.
        kwargs.setdefault("partition_assignment_strategy", DEFAULT_SOURCE_ASSIGNORS)
        kwargs.update(
            bootstrap_servers=self.bootstrap_servers,
            group_id=self.group_id,
            enable_auto_commit=False,
            # Only consulted for partitions that have neither a checkpointed nor a
            # committed offset, and the source seeks those itself.
            auto_offset_reset="earliest",
        )
        return kwargs

    def reader_consumer_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for an executor's group-less, assign-mode consumer."""
        kwargs = {
            k: v
            for k, v in self.consumer_options.items()
            if k
            not in {
                "group_instance_id",
                "session_timeout_ms",
                "heartbeat_interval_ms",
                "max_poll_interval_ms",
                "rebalance_timeout_ms",
                "partition_assignment_strategy",
                "auto_commit_interval_ms",
            }
        }
        kwargs.update(
            bootstrap_servers=self.bootstrap_servers,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest" if not self.fail_on_data_loss else "none",
        )
        # A range is planned below the log end, so the reader never needs to wait for
        # new data; a long poll only parks on the log end after a range, and it would
        # hold up the next range's first fetch on that broker for the whole wait (the
        # worker's consumer is reused across tasks).
        kwargs.setdefault("fetch_max_wait_ms", READER_FETCH_MAX_WAIT_MS)
        return kwargs

    def ssl_context(self) -> ssl.SSLContext | None:
        """A new client TLS context from :attr:`tls` (None without TLS).

        Built on the machine that makes the client - the driver for the group member,
        each executor for its readers - since a context cannot travel with the options.
        """
        return None if self.tls is None else self.tls.context()

    @property
    def read_committed(self) -> bool:
        return self.consumer_options.get("isolation_level") == "read_committed"

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for a bare aiokafka client (watermark probes)."""
        kwargs = {k: v for k, v in self.consumer_options.items() if k in _CLIENT_OPTIONS}
        for name in ("client_id", "request_timeout_ms", "metadata_max_age_ms"):
            if name in self.consumer_options:
                kwargs[name] = self.consumer_options[name]
        kwargs["bootstrap_servers"] = self.bootstrap_servers
        return kwargs


#: An executor reader's ``fetch_max_wait_ms`` unless ``kafka.fetch.max.wait.ms`` is set.
READER_FETCH_MAX_WAIT_MS = 10

#: The source member's assignors unless ``kafka.partition.assignment.strategy`` is set.
DEFAULT_SOURCE_ASSIGNORS = ("cooperative-sticky",)


def _bool(name: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise ConfigurationError(f"option {name} must be 'true' or 'false', got {value!r}")


def _positive_int(name: str, value: str) -> int:
    text = value.strip()
    if not _INT.match(text) or int(text) <= 0:
        raise ConfigurationError(f"option {name} must be a positive integer, got {value!r}")
    return int(text)


def _consumer_value(value: str) -> Any:
    text = value.strip()
    if _INT.match(text):
        return int(text)
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    return text


def _consumer_option(key: str, value: str) -> tuple[str, Any]:
    name = key[len("kafka.") :].replace(".", "_")
    if name in _RESERVED_CONSUMER_OPTIONS:
        raise ConfigurationError(f"option {key} is set by the source and cannot be overridden")
    known = set(ConsumerConfig.__dataclass_fields__) - {"client_options"}
    if name not in known:
        raise ConfigurationError(
            f"option {key} is not a consumer setting (kafka.* options map to GroupConsumer "
            f"arguments, e.g. kafka.session.timeout.ms -> session_timeout_ms)"
        )
    if name == "partition_assignment_strategy":
        return name, tuple(part.strip() for part in value.split(",") if part.strip())
    converted = _consumer_value(value)
    spec = ConsumerConfig.__dataclass_fields__.get(name)
    default = None if spec is None else spec.default
    if isinstance(default, bool) and not isinstance(converted, bool):
        raise ConfigurationError(f"option {key} must be 'true' or 'false', got {value!r}")
    if (
        isinstance(default, int)
        and not isinstance(default, bool)
        and (not isinstance(converted, int) or isinstance(converted, bool))
    ):
        raise ConfigurationError(f"option {key} must be an integer, got {value!r}")
    return name, converted


def _starting_offsets(value: str) -> StartingOffsets:
    text = value.strip()
    if text.lower() in ("earliest", "latest"):
        return "earliest" if text.lower() == "earliest" else "latest"
    if not text.startswith("{"):
        raise ConfigurationError(
            f"option startingOffsets must be 'earliest', 'latest' or a JSON object like "
            f'{{"topic": {{"0": 23, "1": -2}}}}, got {value!r}'
        )
    try:
        parsed = json.loads(text)
    except ValueError as exc:
        raise ConfigurationError(f"option startingOffsets is not valid JSON: {exc}") from None
    result: dict[TopicPartition, int] = {}
    if not isinstance(parsed, dict):
        raise ConfigurationError("option startingOffsets JSON must be an object of topics")
    for topic, partitions in parsed.items():
        validate_topic_name(topic)
        if not isinstance(partitions, dict):
            raise ConfigurationError(
                f"option startingOffsets: topic {topic!r} must map partition numbers to offsets"
            )
        for partition, offset in partitions.items():
            if not (isinstance(partition, str) and partition.isdigit()):
                raise ConfigurationError(
                    f"option startingOffsets: {topic!r} has a non-numeric partition {partition!r}"
                )
            if not isinstance(offset, int) or isinstance(offset, bool) or offset < EARLIEST:
                raise ConfigurationError(
                    f"option startingOffsets: offset for {topic}-{partition} must be an int "
                    f">= 0, or -2 (earliest) / -1 (latest), got {offset!r}"
                )
            result[TopicPartition(topic, int(partition))] = offset
    return result


def parse_options(options: Mapping[str, str]) -> SourceOptions:
    """Validate Spark's option map; raise ConfigurationError naming the first bad option."""
    opts = {str(k).lower(): str(v) for k, v in options.items()}
    consumer, tls = _security(opts)
    for key, value in opts.items():
        if key in _UNSUPPORTED:
            raise ConfigurationError(f"option {_UNSUPPORTED[key]}")
        if key in _IGNORED or key in _SOURCE_OPTIONS:
            continue
        if key in ("kafka.bootstrap.servers", "kafka.group.id") or _is_security_key(key):
            continue
        if key.startswith("kafka."):
            name, converted = _consumer_option(key, value)
            consumer[name] = converted
            continue
        raise ConfigurationError(
            f"unknown option {key!r}; known: {', '.join(sorted(_SOURCE_OPTIONS.values()))}, "
            "kafka.bootstrap.servers, kafka.group.id and other kafka.* consumer settings"
        )

    servers = opts.get("kafka.bootstrap.servers", "").strip()
    if not servers:
        raise ConfigurationError("option kafka.bootstrap.servers is required")
    group_id = opts.get("kafka.group.id", "").strip()
    if not group_id:
        raise ConfigurationError(
            "option kafka.group.id is required: the source is a member of that consumer group"
        )

    subscribe = opts.get("subscribe")
    pattern = opts.get("subscribepattern")
    if subscribe is not None and pattern is not None:
        raise ConfigurationError("options subscribe and subscribePattern are exclusive; set one")
    topics: tuple[str, ...] = ()
    if subscribe is not None:
        names = [t.strip() for t in subscribe.split(",") if t.strip()]
        if not names:
            raise ConfigurationError("option subscribe names no topic")
        topics = tuple(dict.fromkeys(validate_topic_name(t) for t in names))
    elif pattern is not None:
        if not pattern.strip():
            raise ConfigurationError("option subscribePattern is empty")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ConfigurationError(
                f"option subscribePattern {pattern!r} is not a valid regex: {exc}"
            ) from None
    else:
        raise ConfigurationError("no topics: set option subscribe or subscribePattern")

    starting: StartingOffsets = "latest"
    if "startingoffsets" in opts:
        starting = _starting_offsets(opts["startingoffsets"])
    if isinstance(starting, dict) and topics:
        stray = sorted({tp.topic for tp in starting} - set(topics))
        if stray:
            raise ConfigurationError(
                f"option startingOffsets names topics not subscribed to: {', '.join(stray)}"
            )

    limit: int | None = None
    for name in ("maxOffsetsPerTrigger", "maxRecordsPerBatch"):
        if name.lower() in opts:
            rows = _positive_int(name, opts[name.lower()])
            if limit is not None and rows != limit:
                raise ConfigurationError(
                    "options maxOffsetsPerTrigger and maxRecordsPerBatch disagree; set one"
                )
            limit = rows

    if "includeheaders" in opts:
        _bool("includeHeaders", opts["includeheaders"])  # accepted; headers are always a column

    result = SourceOptions(
        bootstrap_servers=servers,
        group_id=group_id,
        topics=topics,
        pattern=pattern,
        starting_offsets=starting,
        max_offsets_per_trigger=limit,
        fail_on_data_loss=_bool("failOnDataLoss", opts.get("failondataloss", "true")),
        start_timeout_s=_positive_int("startTimeoutMs", opts.get("starttimeoutms", "120000"))
        / 1000,
        poll_timeout_s=_positive_int(
            "kafkaConsumer.pollTimeoutMs", opts.get("kafkaconsumer.polltimeoutms", "120000")
        )
        / 1000,
        consumer_options=consumer,
        tls=tls,
    )
    if tls is not None:
        tls.context()  # an unreadable file fails load() here, naming its option
    # Let ConsumerConfig judge the values now (types, ranges, heartbeat < session), so
    # that a bad kafka.* value also fails at load() rather than in the source process.
    config_kwargs = {
        k: v for k, v in result.group_consumer_kwargs().items() if k not in _CLIENT_OPTIONS
    }
    try:
        ConsumerConfig(**config_kwargs)
    except ConfigurationError as exc:
        raise ConfigurationError(f"kafka.* option: {exc}") from None
    except TypeError as exc:  # a comparison between a str and an int, for instance
        raise ConfigurationError(f"kafka.* option has a value of the wrong type: {exc}") from None
    return result


def _is_security_key(key: str) -> bool:
    return key == "kafka.security.protocol" or key.startswith(("kafka.sasl.", "kafka.ssl."))


def _security(opts: Mapping[str, str]) -> tuple[dict[str, Any], TlsFiles | None]:
    """The client security options and the TLS files of the ``kafka.*`` security keys.

    Values stay strings (a numeric password is still a password); each refusal names
    the option and never echoes a secret's value.
    """
    given = {k[len("kafka.") :]: v for k, v in opts.items() if _is_security_key(k)}
    unknown = sorted(k for k in given if k not in _SECURITY_KEYS)
    if unknown:
        raise ConfigurationError(
            f"option kafka.{unknown[0]} is not supported; the security options are "
            + ", ".join(f"kafka.{k}" for k in _SECURITY_KEYS)
        )
    client: dict[str, Any] = {}
    protocol = given.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in PROTOCOLS:
        raise ConfigurationError(
            f"option kafka.security.protocol must be one of {', '.join(PROTOCOLS)}, got "
            f"{given['security.protocol']!r}"
        )
    if protocol != "PLAINTEXT":
        client["security_protocol"] = protocol
    sasl = [k for k in given if k.startswith("sasl.")]
    if protocol.startswith("SASL_"):
        client.update(_sasl(protocol, given))
    elif sasl:
        raise ConfigurationError(
            f"option kafka.{sasl[0]} is set but kafka.security.protocol is {protocol}: SASL "
            "needs SASL_PLAINTEXT or SASL_SSL"
        )
    tls_keys = [k for k in given if k.startswith("ssl.")]
    if protocol.endswith("SSL"):
        return client, _tls_files(given)
    if tls_keys:
        raise ConfigurationError(
            f"option kafka.{tls_keys[0]} is set but kafka.security.protocol is {protocol}: "
            "TLS needs SSL or SASL_SSL"
        )
    return client, None


def _sasl(protocol: str, given: Mapping[str, str]) -> dict[str, Any]:
    mechanism = given.get("sasl.mechanism", "PLAIN").strip().upper()
    if mechanism == "OAUTHBEARER":
        raise ConfigurationError(
            "option kafka.sasl.mechanism OAUTHBEARER is not supported by the source: a token "
            "comes from a provider object, which string options cannot carry; use ingest() "
            "with a GroupConsumer(sasl_oauth_token_provider=...)"
        )
    if mechanism not in SASL_MECHANISMS:
        raise ConfigurationError(
            f"option kafka.sasl.mechanism must be one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 "
            f"or GSSAPI, got {given['sasl.mechanism']!r}"
        )
    client: dict[str, Any] = {"sasl_mechanism": mechanism}
    for key in ("sasl.kerberos.service.name", "sasl.kerberos.domain.name"):
        if key in given:
            client[key.replace(".", "_")] = given[key].strip()
    plain = [k for k in ("sasl.plain.username", "sasl.plain.password") if k in given]
    if "sasl.jaas.config" in given:
        if plain:
            raise ConfigurationError(
                f"options kafka.sasl.jaas.config and kafka.{plain[0]} both give credentials; "
                "set one"
            )
        user, password = jaas_credentials(
            given["sasl.jaas.config"], "option kafka.sasl.jaas.config"
        )
    else:
        user = given.get("sasl.plain.username", "")
        password = given.get("sasl.plain.password", "")
    if mechanism == "GSSAPI":
        return client
    if not user or not password:
        raise ConfigurationError(
            f"kafka.security.protocol {protocol} with SASL mechanism {mechanism} needs a "
            "username and password: option kafka.sasl.jaas.config (as for Spark's Kafka "
            "source), or kafka.sasl.plain.username and kafka.sasl.plain.password"
        )
    client.update(sasl_plain_username=user, sasl_plain_password=password)
    return client


def _tls_files(given: Mapping[str, str]) -> TlsFiles:
    for store, key_file in (("truststore", "CA"), ("keystore", "client certificate and key")):
        kind = given.get(f"ssl.{store}.type", "JKS" if f"ssl.{store}.location" in given else "PEM")
        kind = kind.strip().upper()
        if kind == "PEM":
            continue
        if kind not in ("JKS", "PKCS12"):
            raise ConfigurationError(
                f"option kafka.ssl.{store}.type must be PEM (JKS and PKCS12 are refused with "
                f"how to convert them), got {given[f'ssl.{store}.type']!r}"
            )
        how = (
            "keytool -exportcert -rfc -keystore TRUSTSTORE -alias CA -file ca.pem"
            if store == "truststore"
            else "openssl pkcs12 -in KEYSTORE.p12 -out client.pem (keytool -importkeystore "
            "-srcstoretype JKS -deststoretype PKCS12 first, for JKS)"
        )
        raise ConfigurationError(
            f"option kafka.ssl.{store}.location: a {kind} {store} (ssl.{store}.type "
            f"{'defaults to JKS' if f'ssl.{store}.type' not in given else 'is ' + kind}) is "
            f"Java-only; export the {key_file} as PEM ({how}) and set "
            f"kafka.ssl.{store}.type=PEM"
        )
    if "ssl.keystore.password" in given:
        raise ConfigurationError(
            "option kafka.ssl.keystore.password is not used with a PEM keystore: give the "
            "private key's password as kafka.ssl.key.password"
        )
    values: dict[str, str] = {}
    names: dict[str, str] = {}
    for key, target in _SSL_KEYS.items():
        if target is None or key not in given:
            continue
        if target in values:
            raise ConfigurationError(
                f"options {names[target]} and kafka.{key} both set the same thing; set one"
            )
        values[target] = given[key].strip() if target != "password" else given[key]
        names[target] = f"kafka.{key}"
    if "ssl.keystore.location" in given and "keyfile" in values:
        raise ConfigurationError(
            "options kafka.ssl.keystore.location and kafka.ssl.keyfile: a PEM keystore holds "
            "the key with the certificate; set kafka.ssl.certfile and kafka.ssl.keyfile instead"
        )
    check_hostname = True
    if "ssl.check.hostname" in given:
        check_hostname = _bool("kafka.ssl.check.hostname", given["ssl.check.hostname"])
    algorithm = given.get("ssl.endpoint.identification.algorithm")
    if algorithm is not None:
        if algorithm.strip().lower() not in ("", "https"):
            raise ConfigurationError(
                "option kafka.ssl.endpoint.identification.algorithm must be https (check the "
                f"broker's hostname, the default) or empty (do not), got {algorithm!r}"
            )
        check_hostname = check_hostname and algorithm.strip() != ""
    for target in ("cafile", "certfile", "keyfile"):
        if target in values and not values[target]:
            raise ConfigurationError(f"option {names[target]} is empty")
    names.setdefault("cafile", "kafka.ssl.cafile")
    names.setdefault("certfile", "kafka.ssl.certfile")
    names.setdefault("keyfile", "kafka.ssl.keyfile")
    names.setdefault("password", "kafka.ssl.password")
    return TlsFiles(
        cafile=values.get("cafile"),
        certfile=values.get("certfile"),
        keyfile=values.get("keyfile"),
        password=values.get("password"),
        check_hostname=check_hostname,
        names=tuple(sorted(names.items())),
    )
