"""Subscription and partition-count tracking: pure diffs that feed the machines."""

from __future__ import annotations

import re

from aiogroup._coordination.tracking import (
    SubscriptionView,
    classic_subscription_diff,
    consumer_subscription_diff,
    partition_count_change,
    snapshot_counts,
)
from aiogroup._membership import events as E

TOPICS = SubscriptionView("AUTO_TOPICS", frozenset({"a"}), frozenset({"a"}))
PATTERN = SubscriptionView("AUTO_PATTERN", frozenset(), frozenset({"t1"}), re.compile("t.*"))


def test_classic_first_subscription_is_an_event_then_nothing() -> None:
    first = classic_subscription_diff(None, TOPICS)
    assert first.event == E.SubscriptionChanged(True, "subscribed to ['a']")
    again = classic_subscription_diff(first.key, TOPICS)
    assert again.event is None and again.key == first.key


def test_classic_pattern_matches_changing_is_a_subscription_change() -> None:
    key = classic_subscription_diff(None, PATTERN).key
    more = SubscriptionView("AUTO_PATTERN", frozenset(), frozenset({"t1", "t2"}), PATTERN.pattern)
    assert isinstance(classic_subscription_diff(key, more).event, E.SubscriptionChanged)


def test_classic_unsubscribe_and_assign_leave_once() -> None:
    key = classic_subscription_diff(None, TOPICS).key
    none = SubscriptionView("NONE", frozenset(), frozenset())
    left = classic_subscription_diff(key, none)
    assert left.key is None and left.event == E.SubscriptionChanged(False, "unsubscribed")
    assert classic_subscription_diff(None, none).event is None
    assigned = SubscriptionView("USER_ASSIGNED", frozenset(), frozenset())
    assert classic_subscription_diff(key, assigned).event == E.SubscriptionChanged(
        False, "switched to assign()"
    )


def test_consumer_protocol_sends_the_pattern_not_its_matches() -> None:
    first = consumer_subscription_diff(None, PATTERN)
    assert first.event == E.Subscribed(regex="t.*")
    more = SubscriptionView("AUTO_PATTERN", frozenset(), frozenset({"t1", "t2"}), PATTERN.pattern)
    assert consumer_subscription_diff(first.key, more).event is None
    topics = consumer_subscription_diff(first.key, TOPICS)
    assert topics.event == E.Subscribed(frozenset({"a"}))
    none = SubscriptionView("NONE", frozenset(), frozenset())
    assert consumer_subscription_diff(topics.key, none).event == E.UnsubscribeRequested()
    assert consumer_subscription_diff(None, none).event is None


def test_snapshot_falls_back_to_what_the_assignor_saw() -> None:
    counts = snapshot_counts(["a", "b", "c"], {"a": 3, "b": None}, {"b": 2})
    assert counts == {"a": 3, "b": 2, "c": None}


def test_partition_count_change_rejoins() -> None:
    change = partition_count_change({"a": 3}, {"a": 4}, leader=False)
    assert change.resnapshot and change.event == E.MetadataChanged(
        "partition count of 'a' changed (3 -> 4)"
    )


def test_unknown_count_is_no_change() -> None:
    assert partition_count_change({"a": 3}, {"a": None}, leader=True).event is None
    assert not partition_count_change({"a": 3}, {"a": 3}, leader=True).resnapshot


def test_a_follower_catching_up_resnapshots_without_rejoining() -> None:
    change = partition_count_change({"new": None}, {"new": 2}, leader=False)
    assert change.resnapshot and change.event is None
    led = partition_count_change({"new": None}, {"new": 2}, leader=True)
    assert led.event is not None
