"""Share groups (KIP-932, "queues for Kafka"): :class:`ShareConsumer` and its types.

Consumers of a share group read the same partitions cooperatively; each record is
acquired by one consumer under a time-limited lock and acknowledged one by one
(:class:`AcknowledgeType`: ACCEPT, RELEASE, REJECT, and RENEW to keep the lock).
Records carry their ``delivery_count``.  Requires a broker that serves share groups
(Apache Kafka 4.1+); see docs/usage.md, "Share groups".
"""

from aiogroup._fetch.share_acknowledgements import AckResult, InvalidAcknowledgement
from aiogroup._fetch.share_records import ShareRecord
from aiogroup._protocol.share_types import AcknowledgeType
from aiogroup.share.consumer import ShareConsumer

__all__ = [
    "AckResult",
    "AcknowledgeType",
    "InvalidAcknowledgement",
    "ShareConsumer",
    "ShareRecord",
]
