"""ConsumerProtocol subscription/assignment bytes: round trips, peers' bytes, bad bytes."""

from __future__ import annotations

import struct
from collections.abc import Callable

import pytest
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)
from hypothesis import given
from hypothesis import strategies as st
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolAssignment as KpAssignment,
)
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolSubscription as KpSubscription,
)
from kafka.protocol.old.consumer_protocol import ConsumerProtocolMemberMetadata_v0 as KpMetadataV0

from aiogroup._protocol.classic_embedded import (
    ConsumerAssignment,
    ConsumerSubscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from aiogroup.errors import MalformedProtocolDataError
from aiogroup.structs import TopicPartition

topic_names = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=12
)
int32s = st.integers(min_value=-(2**31), max_value=2**31 - 1)
partitions_lists = st.lists(
    st.builds(TopicPartition, topic_names, st.integers(0, 2**31 - 1)), max_size=8, unique=True
).map(lambda tps: tuple(sorted(tps)))
user_datas = st.none() | st.binary(max_size=32)


@st.composite
def subscriptions(draw: st.DrawFn) -> ConsumerSubscription:
    return ConsumerSubscription(
        topics=tuple(draw(st.lists(topic_names, max_size=6))),
        user_data=draw(user_datas),
        owned_partitions=draw(partitions_lists),
        generation_id=draw(int32s),
        rack_id=draw(st.none() | topic_names),
        version=draw(st.integers(0, 3)),
    )


assignments = st.builds(ConsumerAssignment, partitions_lists, user_datas, st.integers(0, 3))


def _as_of_version(sub: ConsumerSubscription, version: int) -> ConsumerSubscription:
    """What survives encoding ``sub`` at ``version``: fields the version lacks get defaults."""
    return ConsumerSubscription(
        topics=sub.topics,
        user_data=sub.user_data,
        owned_partitions=sub.owned_partitions if version >= 1 else (),
        generation_id=sub.generation_id if version >= 2 else -1,
        rack_id=sub.rack_id if version >= 3 else None,
        version=version,
    )


# --- round trips ---------------------------------------------------------------------


@given(subscriptions())
def test_subscription_round_trips_at_its_version(sub: ConsumerSubscription) -> None:
    assert decode_subscription(encode_subscription(sub)) == _as_of_version(sub, sub.version)


@given(subscriptions(), st.integers(0, 3))
def test_subscription_encoded_at_lower_version_drops_only_newer_fields(
    sub: ConsumerSubscription, version: int
) -> None:
    decoded = decode_subscription(encode_subscription(sub, version))
    assert decoded == _as_of_version(sub, version)


@given(assignments)
def test_assignment_round_trips(asg: ConsumerAssignment) -> None:
    assert decode_assignment(encode_assignment(asg)) == asg


def test_owned_partitions_grouped_by_topic_keep_every_partition() -> None:
    owned = (TopicPartition("b", 2), TopicPartition("a", 0), TopicPartition("b", 0))
    sub = ConsumerSubscription(("a", "b"), owned_partitions=owned, version=1)
    decoded = decode_subscription(encode_subscription(sub))
    assert sorted(decoded.owned_partitions) == sorted(owned)


def test_empty_assignment_bytes_mean_no_partitions() -> None:
    assert decode_assignment(b"") == ConsumerAssignment(partitions=())


def test_user_data_null_and_empty_stay_distinct() -> None:
    for user_data in (None, b""):
        sub = ConsumerSubscription(("t",), user_data=user_data)
        assert decode_subscription(encode_subscription(sub)).user_data == user_data
        asg = ConsumerAssignment((), user_data=user_data)
        assert decode_assignment(encode_assignment(asg)).user_data == user_data


# --- versions newer than ours --------------------------------------------------------


@given(subscriptions(), st.integers(4, 2**15 - 1), st.binary(max_size=16))
def test_newer_subscription_version_reads_known_fields_and_ignores_the_rest(
    sub: ConsumerSubscription, newer: int, appended: bytes
) -> None:
    v3 = encode_subscription(sub, 3)
    data = struct.pack(">h", newer) + v3[2:] + appended
    decoded = decode_subscription(data)
    assert decoded == ConsumerSubscription(
        topics=sub.topics,
        user_data=sub.user_data,
        owned_partitions=sub.owned_partitions,
        generation_id=sub.generation_id,
        rack_id=sub.rack_id,
        version=newer,
    )


@given(assignments, st.integers(4, 2**15 - 1), st.binary(max_size=16))
def test_newer_assignment_version_reads_known_fields(
    asg: ConsumerAssignment, newer: int, appended: bytes
) -> None:
    data = struct.pack(">h", newer) + encode_assignment(asg)[2:] + appended
    decoded = decode_assignment(data)
    assert (decoded.partitions, decoded.user_data, decoded.version) == (
        asg.partitions,
        asg.user_data,
        newer,
    )


# --- other clients' bytes ------------------------------------------------------------


@given(st.lists(topic_names, max_size=5), st.binary(max_size=16))
def test_aiokafka_v0_metadata_decodes(topics: list[str], user_data: bytes) -> None:
    data = ConsumerProtocolMemberMetadata(0, topics, user_data).encode()
    assert decode_subscription(data) == ConsumerSubscription(
        topics=tuple(topics), user_data=user_data, version=0
    )


@given(st.lists(topic_names, max_size=5), st.binary(max_size=16))
def test_our_v0_subscription_decodes_with_aiokafka_and_kafka_python(
    topics: list[str], user_data: bytes
) -> None:
    data = encode_subscription(ConsumerSubscription(tuple(topics), user_data), 0)
    theirs = ConsumerProtocolMemberMetadata.decode(data)
    assert (theirs.version, theirs.subscription, theirs.user_data) == (0, topics, user_data)
    old = KpMetadataV0.decode(data)
    assert (old.version, old.topics, old.user_data) == (0, topics, user_data)


@given(st.lists(topic_names, max_size=5), st.binary(max_size=16))
def test_kafka_python_v0_metadata_decodes(topics: list[str], user_data: bytes) -> None:
    data = KpMetadataV0(0, topics, user_data).encode()
    decoded = decode_subscription(data)
    assert (decoded.topics, decoded.user_data, decoded.version) == (
        tuple(topics),
        user_data,
        0,
    )


def _kp_owned(owned: tuple[TopicPartition, ...]) -> list[tuple[str, list[int]]]:
    by_topic: dict[str, list[int]] = {}
    for tp in owned:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return list(by_topic.items())


@given(subscriptions(), st.integers(0, 3))
def test_kafka_python_subscription_versions_agree_both_ways(
    sub: ConsumerSubscription, version: int
) -> None:
    # kafka-python 3 generates its codec from Kafka's own JSON schema, so agreement
    # with it checks our layouts for versions 1-3 as well.
    expected = _as_of_version(sub, version)
    fields: dict[str, object] = {"topics": list(sub.topics), "user_data": sub.user_data}
    if version >= 1:
        fields["owned_partitions"] = _kp_owned(sub.owned_partitions)
    if version >= 2:
        fields["generation_id"] = sub.generation_id
    if version >= 3:
        fields["rack_id"] = sub.rack_id
    theirs = KpSubscription(version=version, **fields).encode(version=version)
    assert decode_subscription(theirs) == expected
    ours = encode_subscription(sub, version)
    assert ours == theirs


@given(assignments)
def test_kafka_python_and_aiokafka_assignment_bytes_agree(asg: ConsumerAssignment) -> None:
    ours = encode_assignment(asg)
    grouped = _kp_owned(asg.partitions)
    theirs = KpAssignment(
        version=asg.version, assigned_partitions=grouped, user_data=asg.user_data
    ).encode(version=asg.version)
    assert ours == theirs
    aio = ConsumerProtocolMemberAssignment.decode(ours)
    assert sorted(aio.partitions()) == list(asg.partitions)
    assert (
        decode_assignment(
            ConsumerProtocolMemberAssignment(asg.version, grouped, asg.user_data).encode()
        )
        == asg
    )


# --- malformed input -----------------------------------------------------------------


def _decode_or_malformed(decoder: Callable[[bytes], object], data: bytes) -> None:
    try:
        decoder(data)
    except MalformedProtocolDataError as exc:
        assert str(exc)


@given(st.binary(max_size=64))
def test_random_bytes_decode_or_raise_malformed(data: bytes) -> None:
    _decode_or_malformed(decode_subscription, data)
    _decode_or_malformed(decode_assignment, data)


@given(subscriptions(), st.data())
def test_truncated_subscription_raises_malformed(
    sub: ConsumerSubscription, data: st.DataObject
) -> None:
    encoded = encode_subscription(sub)
    cut = data.draw(st.integers(0, len(encoded) - 1))
    with pytest.raises(MalformedProtocolDataError, match="subscription bytes"):
        decode_subscription(encoded[:cut])


@given(assignments, st.data())
def test_truncated_assignment_raises_malformed_unless_empty(
    asg: ConsumerAssignment, data: st.DataObject
) -> None:
    encoded = encode_assignment(asg)
    cut = data.draw(st.integers(1, len(encoded) - 1))
    with pytest.raises(MalformedProtocolDataError, match="assignment bytes"):
        decode_assignment(encoded[:cut])


@given(subscriptions(), st.data())
def test_corrupted_subscription_decodes_or_raises_malformed(
    sub: ConsumerSubscription, data: st.DataObject
) -> None:
    encoded = bytearray(encode_subscription(sub))
    index = data.draw(st.integers(0, len(encoded) - 1))
    encoded[index] = data.draw(st.integers(0, 255))
    _decode_or_malformed(decode_subscription, bytes(encoded))


def test_truncation_message_names_offset_and_field() -> None:
    encoded = encode_assignment(ConsumerAssignment((TopicPartition("topic", 1),)))
    with pytest.raises(MalformedProtocolDataError) as info:
        decode_assignment(encoded[:12])
    message = str(info.value)
    assert "assignment bytes truncated at byte 6 of 12" in message
    assert "assigned_partitions[0].topic" in message


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (struct.pack(">h", -1), "negative version -1"),
        (struct.pack(">hi", 0, -2), "negative length -2"),
        (struct.pack(">hih", 0, 1, -1), "topics[0]: negative length -1"),
        (struct.pack(">hih", 0, 1, -7), "negative length -7"),
        (struct.pack(">hihBi", 0, 1, 1, 0xFF, -1), "not valid UTF-8"),
        (struct.pack(">hii", 0, 0, -3), "user_data: negative length -3"),
        (struct.pack(">hi", 0, 2**31 - 1), "declares 2147483647 elements"),
        (b"", "truncated at byte 0 of 0 while reading version"),
    ],
)
def test_bad_subscription_bytes_are_explained(data: bytes, fragment: str) -> None:
    with pytest.raises(MalformedProtocolDataError, match="subscription") as info:
        decode_subscription(data)
    assert fragment in str(info.value)


def test_null_rack_id_and_user_data_are_allowed() -> None:
    data = struct.pack(">hiii", 3, 0, -1, 0) + struct.pack(">ih", 7, -1)
    assert decode_subscription(data) == ConsumerSubscription(
        topics=(), user_data=None, generation_id=7, rack_id=None, version=3
    )


def test_negative_assignment_partition_count_is_malformed() -> None:
    data = struct.pack(">hih", 0, 1, 1) + b"t" + struct.pack(">i", -4)
    with pytest.raises(MalformedProtocolDataError, match=r"partitions: negative length -4"):
        decode_assignment(data)


# --- bad input to encoders -----------------------------------------------------------


@pytest.mark.parametrize("version", [-1, 4, 2**15])
def test_encoding_unknown_version_is_rejected(version: int) -> None:
    with pytest.raises(ValueError, match="version"):
        encode_subscription(ConsumerSubscription(("t",)), version)
    with pytest.raises(ValueError, match="version"):
        encode_assignment(ConsumerAssignment(()), version)


def test_encoding_a_bare_string_as_topics_is_rejected() -> None:
    with pytest.raises(TypeError, match="not one string"):
        encode_subscription(ConsumerSubscription("topic"))  # type: ignore[arg-type]


def test_encoding_non_topicpartition_is_rejected() -> None:
    with pytest.raises(TypeError, match="TopicPartition"):
        encode_assignment(ConsumerAssignment((("t", 0),)))
