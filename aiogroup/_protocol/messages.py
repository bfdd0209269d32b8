"""The group APIs' message layouts, one table per API, every version we speak.

Field names and version ranges follow Apache Kafka's message specs
(``clients/src/main/resources/common/message/*.json``) in snake_case, so each
table can be checked line by line against its source.  The highest version per
API is the newest one that still works for a classic (non-KIP-848) member and
that names topics rather than topic ids.
"""

from __future__ import annotations

from aiogroup._protocol.schema import ApiStructs, Field, Kind, define_api

__all__ = [
    "CONSUMER_GROUP_DESCRIBE",
    "CONSUMER_GROUP_HEARTBEAT",
    "FIND_COORDINATOR",
    "HEARTBEAT",
    "JOIN_GROUP",
    "LEAVE_GROUP",
    "OFFSET_COMMIT",
    "OFFSET_FETCH",
    "SYNC_GROUP",
    "TOPIC_METADATA",
]

_I8, _I16, _I32, _I64 = Kind.INT8, Kind.INT16, Kind.INT32, Kind.INT64
_STR, _BYTES, _BOOL = Kind.STRING, Kind.BYTES, Kind.BOOL

FIND_COORDINATOR: ApiStructs = define_api(
    "FindCoordinator",
    api_key=10,
    versions=range(7),
    flexible_from=3,
    request_fields=(
        Field("key", _STR, "0-3"),
        Field("key_type", _I8, "1+"),
        # v4+ (KIP-699) batches keys; we always send exactly one.
        Field("coordinator_keys", _STR, "4+", array=True),
    ),
    response_fields=(
        Field("throttle_time_ms", _I32, "1+"),
        Field("error_code", _I16, "0-3"),
        Field("error_message", _STR, "1-3"),
        Field("node_id", _I32, "0-3"),
        Field("host", _STR, "0-3"),
        Field("port", _I32, "0-3"),
        Field(
            "coordinators",
            versions="4+",
            fields=(
                Field("key", _STR),
                Field("node_id", _I32),
                Field("host", _STR),
                Field("port", _I32),
                Field("error_code", _I16),
                Field("error_message", _STR),
            ),
        ),
    ),
)

JOIN_GROUP: ApiStructs = define_api(
    "JoinGroup",
    api_key=11,
    versions=range(10),
    flexible_from=6,
    request_fields=(
        Field("group_id", _STR),
        Field("session_timeout_ms", _I32),
        Field("rebalance_timeout_ms", _I32, "1+"),
        Field("member_id", _STR),
        Field("group_instance_id", _STR, "5+"),
        Field("protocol_type", _STR),
        Field("protocols", fields=(Field("name", _STR), Field("metadata", _BYTES))),
        Field("reason", _STR, "8+"),
    ),
    response_fields=(
        Field("throttle_time_ms", _I32, "2+"),
        Field("error_code", _I16),
        Field("generation_id", _I32),
        Field("protocol_type", _STR, "7+"),
        Field("protocol_name", _STR),
        Field("leader", _STR),
        Field("skip_assignment", _BOOL, "9+"),
        Field("member_id", _STR),
        Field(
            "members",
            fields=(
                Field("member_id", _STR),
                Field("group_instance_id", _STR, "5+"),
                Field("metadata", _BYTES),
            ),
        ),
    ),
)

HEARTBEAT: ApiStructs = define_api(
    "Heartbeat",
    api_key=12,
    versions=range(5),
    flexible_from=4,
    request_fields=(
        Field("group_id", _STR),
        Field("generation_id", _I32),
        Field("member_id", _STR),
        Field("group_instance_id", _STR, "3+"),
    ),
    response_fields=(
        Field("throttle_time_ms", _I32, "1+"),
        Field("error_code", _I16),
    ),
)

LEAVE_GROUP: ApiStructs = define_api(
    "LeaveGroup",
    api_key=13,
    versions=range(6),
    flexible_from=4,
    request_fields=(
        Field("group_id", _STR),
        Field("member_id", _STR, "0-2"),
        Field(
            "members",
            versions="3+",
            fields=(
                Field("member_id", _STR),
                Field("group_instance_id", _STR),
                Field("reason", _STR, "5+"),
            ),
        ),
    ),
    response_fields=(
        Field("throttle_time_ms", _I32, "1+"),
        Field("error_code", _I16),
        Field(
            "members",
            versions="3+",
            fields=(
                Field("member_id", _STR),
                Field("group_instance_id", _STR),
                Field("error_code", _I16),
            ),
        ),
    ),
)

SYNC_GROUP: ApiStructs = define_api(
    "SyncGroup",
    api_key=14,
    versions=range(6),
    flexible_from=4,
    request_fields=(
        Field("group_id", _STR),
        Field("generation_id", _I32),
        Field("member_id", _STR),
        Field("group_instance_id", _STR, "3+"),
        Field("protocol_type", _STR, "5+"),
        Field("protocol_name", _STR, "5+"),
        Field("assignments", fields=(Field("member_id", _STR), Field("assignment", _BYTES))),
    ),
    response_fields=(
        Field("throttle_time_ms", _I32, "1+"),
        Field("error_code", _I16),
        Field("protocol_type", _STR, "5+"),
        Field("protocol_name", _STR, "5+"),
        Field("assignment", _BYTES),
    ),
)

# v9 is v8 on the wire (it only marks KIP-848 readiness); v10 replaces topic names
# with topic ids, which a classic member has no use for.
OFFSET_COMMIT: ApiStructs = define_api(
    "OffsetCommit",
    api_key=8,
    versions=range(10),
    flexible_from=8,
    request_fields=(
        Field("group_id", _STR),
        # GenerationIdOrMemberEpoch in newer specs (KIP-848); a classic member sends its generation.
        Field("generation_id", _I32, "1+"),
        Field("member_id", _STR, "1+"),
        Field("group_instance_id", _STR, "7+"),
        Field("retention_time_ms", _I64, "2-4"),
        Field(
            "topics",
            fields=(
                Field("name", _STR),
                Field(
                    "partitions",
                    fields=(
                        Field("partition_index", _I32),
                        Field("committed_offset", _I64),
                        Field("committed_leader_epoch", _I32, "6+"),
                        Field("commit_timestamp", _I64, "1"),
                        Field("committed_metadata", _STR),
                    ),
                ),
            ),
        ),
    ),
    response_fields=(
        Field("throttle_time_ms", _I32, "3+"),
        Field(
            "topics",
            fields=(
                Field("name", _STR),
                Field(
                    "partitions",
                    fields=(Field("partition_index", _I32), Field("error_code", _I16)),
                ),
            ),
        ),
    ),
)

_OFFSET_FETCH_PARTITION = (
    Field("partition_index", _I32),
    Field("committed_offset", _I64),
    Field("committed_leader_epoch", _I32, "5+"),
    Field("metadata", _STR),
    Field("error_code", _I16),
)

# v8+ batches groups; v9 adds the KIP-848 member fields (left at their defaults by a
# classic member); v10 swaps topic names for ids and is not spoken here.
OFFSET_FETCH: ApiStructs = define_api(
    "OffsetFetch",
    api_key=9,
    versions=range(10),
    flexible_from=6,
    request_fields=(
        Field("group_id", _STR, "0-7"),
        Field(
            "topics",
            versions="0-7",
            fields=(Field("name", _STR), Field("partition_indexes", _I32, array=True)),
        ),
        Field(
            "groups",
            versions="8+",
            fields=(
                Field("group_id", _STR),
                Field("member_id", _STR, "9+"),
                Field("member_epoch", _I32, "9+"),
                Field(
                    "topics",
                    fields=(Field("name", _STR), Field("partition_indexes", _I32, array=True)),
                ),
            ),
        ),
        Field("require_stable", _BOOL, "7+"),
    ),
    response_fields=(
        Field("throttle_time_ms", _I32, "3+"),
        Field(
            "topics",
            versions="0-7",
            fields=(Field("name", _STR), Field("partitions", fields=_OFFSET_FETCH_PARTITION)),
        ),
        Field("error_code", _I16, "2-7"),
        Field(
            "groups",
            versions="8+",
            fields=(
                Field("group_id", _STR),
                Field(
                    "topics",
                    fields=(
                        Field("name", _STR),
                        Field("partitions", fields=_OFFSET_FETCH_PARTITION),
                    ),
                ),
                Field("error_code", _I16),
            ),
        ),
    ),
)

# --- KIP-848: the consumer group protocol ---------------------------------------------
#
# One RPC replaces JoinGroup/SyncGroup/Heartbeat/LeaveGroup.  Every version is
# flexible; v1 (Kafka 4.0) adds the broker-side regex subscription.  The "null if
# it didn't change since the last heartbeat" fields let a member send its full
# state only when it joins, rejoins or changes; partitions are named by topic id.
_CONSUMER_GROUP_TOPIC_PARTITIONS = (
    Field("topic_id", Kind.UUID),
    Field("partitions", _I32, array=True),
)

CONSUMER_GROUP_HEARTBEAT: ApiStructs = define_api(
    "ConsumerGroupHeartbeat",
    api_key=68,
    versions=range(2),
    flexible_from=0,
    request_fields=(
        Field("group_id", _STR),
        Field("member_id", _STR),
        # 0 joins, -1 leaves, -2 leaves a static member that will come back.
        Field("member_epoch", _I32),
        Field("instance_id", _STR),
        Field("rack_id", _STR),
        Field("rebalance_timeout_ms", _I32),
        Field("subscribed_topic_names", _STR, array=True),
        Field("subscribed_topic_regex", _STR, "1+"),
        Field("server_assignor", _STR),
        Field("topic_partitions", fields=_CONSUMER_GROUP_TOPIC_PARTITIONS),
    ),
    response_fields=(
        Field("throttle_time_ms", _I32),
        Field("error_code", _I16),
        Field("error_message", _STR),
        Field("member_id", _STR),
        Field("member_epoch", _I32),
        Field("heartbeat_interval_ms", _I32),
        Field(
            "assignment",
            single=True,
            fields=(Field("topic_partitions", fields=_CONSUMER_GROUP_TOPIC_PARTITIONS),),
        ),
    ),
)

# Metadata v10+ names topics by id as well (KIP-516).  aiokafka's client stops at v5,
# so a consumer-protocol member asks for the id <-> name map itself; only the
# fields it reads are used, the rest are here so the layout matches the spec.
TOPIC_METADATA: ApiStructs = define_api(
    "Metadata",
    api_key=3,
    versions=range(10, 13),
    flexible_from=9,
    request_fields=(
        Field("topics", fields=(Field("topic_id", Kind.UUID, "10+"), Field("name", _STR))),
        Field("allow_auto_topic_creation", _BOOL, "4+"),
        Field("include_cluster_authorized_operations", _BOOL, "8-10"),
        Field("include_topic_authorized_operations", _BOOL, "8+"),
    ),
    response_fields=(
        Field("throttle_time_ms", _I32, "3+"),
        Field(
            "brokers",
            fields=(
                Field("node_id", _I32),
                Field("host", _STR),
                Field("port", _I32),
                Field("rack", _STR, "1+"),
            ),
        ),
        Field("cluster_id", _STR, "2+"),
        Field("controller_id", _I32, "1+"),
        Field(
            "topics",
            fields=(
                Field("error_code", _I16),
                Field("name", _STR),
                Field("topic_id", Kind.UUID, "10+"),
                Field("is_internal", _BOOL, "1+"),
                Field(
                    "partitions",
                    fields=(
                        Field("error_code", _I16),
                        Field("partition_index", _I32),
                        Field("leader_id", _I32),
                        Field("leader_epoch", _I32, "7+"),
                        Field("replica_nodes", _I32, array=True),
                        Field("isr_nodes", _I32, array=True),
                        Field("offline_replicas", _I32, "5+", array=True),
                    ),
                ),
                Field("topic_authorized_operations", _I32, "8+"),
            ),
        ),
        Field("cluster_authorized_operations", _I32, "8-10"),
    ),
)

_DESCRIBED_ASSIGNMENT = (
    Field(
        "topic_partitions",
        fields=(
            Field("topic_id", Kind.UUID),
            Field("topic_name", _STR),
            Field("partitions", _I32, array=True),
        ),
    ),
)

#: The broker's view of a consumer-protocol group (classic DescribeGroups does not
#: describe KIP-848 groups): members, epochs, current and target assignments.
CONSUMER_GROUP_DESCRIBE: ApiStructs = define_api(
    "ConsumerGroupDescribe",
    api_key=69,
    versions=range(1),
    flexible_from=0,
    request_fields=(
        Field("group_ids", _STR, array=True),
        Field("include_authorized_operations", _BOOL),
    ),
    response_fields=(
        Field("throttle_time_ms", _I32),
        Field(
            "groups",
            fields=(
                Field("error_code", _I16),
                Field("error_message", _STR),
                Field("group_id", _STR),
                Field("group_state", _STR),
                Field("group_epoch", _I32),
                Field("assignment_epoch", _I32),
                Field("assignor_name", _STR),
                Field(
                    "members",
                    fields=(
                        Field("member_id", _STR),
                        Field("instance_id", _STR),
                        Field("rack_id", _STR),
                        Field("member_epoch", _I32),
                        Field("client_id", _STR),
                        Field("client_host", _STR),
                        Field("subscribed_topic_names", _STR, array=True),
                        Field("subscribed_topic_regex", _STR),
                        Field(
                            "assignment", single=True, nullable=False, fields=_DESCRIBED_ASSIGNMENT
                        ),
                        Field(
                            "target_assignment",
                            single=True,
                            nullable=False,
                            fields=_DESCRIBED_ASSIGNMENT,
                        ),
                    ),
                ),
                Field("authorized_operations", _I32),
            ),
        ),
    ),
)
