"""aiogroup: an asyncio-native Kafka consumer-group member.

``GroupConsumer`` follows aiokafka's ``AIOKafkaConsumer`` API; the record and
partition types are aiokafka's own, so both libraries can be mixed.
"""

from aiogroup.consumer import GroupConsumer
from aiogroup.errors import (
    CommitFailedError,
    ConfigurationError,
    ConsumerStoppedError,
    FencedInstanceIdError,
    IllegalStateError,
    InvalidTopicNameError,
    KafkaError,
    MalformedProtocolDataError,
    NoOffsetForPartitionError,
    RecordDeserializationError,
)
from aiogroup.listeners import AsyncConsumerRebalanceListener, ConsumerRebalanceListener
from aiogroup.processing import (
    DeadLetter,
    DeadLetterTopicError,
    ProcessingError,
    Processor,
    RetryPolicy,
    ShareProcessor,
)
from aiogroup.share import AcknowledgeType, ShareConsumer, ShareRecord
from aiogroup.structs import (
    ConsumerRecord,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    RebalanceProtocol,
    TopicPartition,
)

__version__ = "0.1.0"

__all__ = [
    "AcknowledgeType",
    "AsyncConsumerRebalanceListener",
    "CommitFailedError",
    "ConfigurationError",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "ConsumerStoppedError",
    "DeadLetter",
    "DeadLetterTopicError",
    "FencedInstanceIdError",
    "GroupConsumer",
    "IllegalStateError",
    "InvalidTopicNameError",
    "KafkaError",
    "MalformedProtocolDataError",
    "NoOffsetForPartitionError",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "ProcessingError",
    "Processor",
    "RebalanceProtocol",
    "RecordDeserializationError",
    "RetryPolicy",
    "ShareConsumer",
    "ShareProcessor",
    "ShareRecord",
    "TopicPartition",
]
