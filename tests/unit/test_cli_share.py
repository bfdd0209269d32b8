"""``aiogroup share``: the argument parser, the refusals built from broker answers, and
the text output (the broker side is tests/integration/test_share_admin.py)."""

from __future__ import annotations

import uuid

import pytest

from aiogroup._protocol.share_admin import ShareOffsetsResult, ShareStartOffset
from aiogroup.cli import CliError, _raise_share_errors, _render, build_parser

TID = uuid.UUID(int=1)


def test_share_subcommands_parse() -> None:
    parser = build_parser()
    args = parser.parse_args(["share", "reset", "jobs", "--topic", "a", "--to-latest"])
    assert (args.command, args.share_command, args.group, args.topic) == (
        "share",
        "reset",
        "jobs",
        ["a"],
    )
    assert args.to_latest and not args.execute
    args = parser.parse_args(["share", "delete", "jobs", "--topic", "a", "--execute"])
    assert args.execute and args.topic == ["a"]


@pytest.mark.parametrize(
    "argv",
    [
        ["share"],  # no subcommand
        ["share", "reset", "jobs"],  # no target
        ["share", "reset", "jobs", "--to-earliest", "--to-latest"],
        ["share", "reset", "jobs", "--shift-by", "3"],  # not a share reset option
        ["share", "delete", "jobs"],  # --topic is required
    ],
)
def test_bad_usage_exits_2(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(argv)
    assert exit_.value.code == 2


def _row(partition: int, code: int, message: str | None = None) -> ShareStartOffset:
    return ShareStartOffset("t", TID, partition, -1, -1, None, code, message)


def test_non_empty_group_is_named() -> None:
    with pytest.raises(CliError, match="the group has members: stop its share consumers"):
        _raise_share_errors("share reset of g", ShareOffsetsResult(68, "busy", ()))


def test_partition_errors_are_listed() -> None:
    result = ShareOffsetsResult(0, None, (_row(0, 0), _row(1, 3, "no such partition")))
    with pytest.raises(CliError, match=r"t-1: UnknownTopicOrPartitionError: no such partition"):
        _raise_share_errors("share reset of g", result)
    _raise_share_errors("share reset of g", ShareOffsetsResult(0, None, (_row(0, 0),)))


def test_describe_text() -> None:
    text = _render(
        "share",
        {
            "group": "jobs",
            "state": "Stable",
            "assignor": "simple",
            "group_epoch": 4,
            "members": [
                {
                    "member_id": "m1",
                    "client_id": "w1",
                    "host": "/10.0.0.1",
                    "member_epoch": 4,
                    "assignment": ["t-0", "t-1"],
                }
            ],
            "partitions": [{"topic": "t", "partition": 0, "start_offset": 5, "lag": 2}],
        },
    )
    lines = text.splitlines()
    assert lines[0] == "share group jobs: state Stable, assignor simple, 1 member(s)"
    assert "t-0,t-1" in lines[2]
    assert lines[-1].split() == ["t", "0", "5", "2"]


def test_reset_and_delete_text() -> None:
    reset = _render(
        "share",
        {"group": "g", "executed": False, "partitions": [{"topic": "t", "partition": 0,
                                                          "current": 3, "new": 0}]},
    )  # fmt: skip
    assert reset.startswith("share group g: would reset (dry run; --execute to apply)")
    deleted = _render("share", {"group": "g", "executed": True, "topics": ["a", "b"]})
    assert deleted == "share group g: deleted the state of a, b"
