"""aiogroup: an asyncio-native Kafka consumer-group member."""

__version__ = "0.1.0"
