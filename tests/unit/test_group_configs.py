"""Parsing the consumer-group session timeout out of a DescribeConfigs answer."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from aiogroup._protocol.group_configs import parse_session_timeout, session_timeout_request


def answer(*resources: tuple[int, int, list[tuple[str, str | None]]]) -> Any:
    """resources: (error code, resource type, [(name, value)])."""
    return SimpleNamespace(
        resources=[
            (code, None, rtype, "x", [(n, v, True, 5, False, []) for n, v in entries])
            for code, rtype, entries in resources
        ]
    )


GROUP, BROKER = 32, 4


def test_the_request_names_the_group_and_the_answering_broker() -> None:
    req = session_timeout_request("g", 3)
    assert req._resources == [
        (GROUP, "g", ["consumer.session.timeout.ms"]),
        (
            BROKER,
            "3",
            ["group.consumer.session.timeout.ms", "group.consumer.max.session.timeout.ms"],
        ),
    ]


def test_the_group_config_wins_over_the_broker_default() -> None:
    resp = answer(
        (0, GROUP, [("consumer.session.timeout.ms", "20000")]),
        (0, BROKER, [("group.consumer.session.timeout.ms", "45000")]),
    )
    assert parse_session_timeout(resp) == 20000


def test_the_broker_default_when_the_group_resource_fails() -> None:
    resp = answer(
        (29, GROUP, [("consumer.session.timeout.ms", "20000")]),  # authorization failed
        (0, BROKER, [("group.consumer.session.timeout.ms", "45000")]),
    )
    assert parse_session_timeout(resp) == 45000


def test_capped_at_the_broker_maximum() -> None:
    resp = answer(
        (0, GROUP, [("consumer.session.timeout.ms", "90000")]),
        (
            0,
            BROKER,
            [
                ("group.consumer.session.timeout.ms", "45000"),
                ("group.consumer.max.session.timeout.ms", "60000"),
            ],
        ),
    )
    assert parse_session_timeout(resp) == 60000


def test_nothing_usable_is_none() -> None:
    assert parse_session_timeout(answer()) is None
    resp = answer(
        (0, GROUP, [("consumer.session.timeout.ms", None)]),
        (0, BROKER, [("group.consumer.session.timeout.ms", "soon"), ("other", "1")]),
    )
    assert parse_session_timeout(resp) is None
