"""The default assignor list (issue 31): a rolling move from aiokafka works unchanged.

aiokafka lists only ``roundrobin``; the broker accepts a new member only if it shares
a protocol with every member, so aiogroup's default must list ``roundrobin`` too.
``range`` stays first: an all-aiogroup group (and one with Java or librdkafka members
on their defaults) keeps choosing it, as before.
"""

from __future__ import annotations

from aiogroup import GroupConsumer
from aiogroup.assignors import (
    DEFAULT_ASSIGNORS,
    inconsistent_protocol_hint,
    resolve_assignors,
    select_rebalance_protocol,
)
from aiogroup.config import ConsumerConfig
from aiogroup.structs import RebalanceProtocol

AIOKAFKA_DEFAULT = ("roundrobin",)
JAVA_DEFAULT = ("range", "cooperative-sticky")
LIBRDKAFKA_DEFAULT = ("range", "roundrobin")


def test_defaults_are_one_list() -> None:
    assert ConsumerConfig().partition_assignment_strategy == DEFAULT_ASSIGNORS
    consumer = GroupConsumer(group_id="g")
    assert tuple(a.name for a in consumer._assignors) == DEFAULT_ASSIGNORS


def test_default_shares_a_protocol_with_every_common_client_default() -> None:
    for other in (AIOKAFKA_DEFAULT, JAVA_DEFAULT, LIBRDKAFKA_DEFAULT):
        assert set(DEFAULT_ASSIGNORS) & set(other), other
    assert DEFAULT_ASSIGNORS[0] == "range"  # the first choice of an all-aiogroup group


def test_default_rebalance_protocol_stays_eager() -> None:
    assignors = resolve_assignors(DEFAULT_ASSIGNORS)
    assert select_rebalance_protocol(assignors) is RebalanceProtocol.EAGER


def test_inconsistent_protocol_hint_names_the_setting_and_what_was_offered() -> None:
    hint = inconsistent_protocol_hint(["range"])
    assert "partition_assignment_strategy" in hint
    assert "offered the assignors range" in hint
    assert "aiokafka: roundrobin" in hint
