"""AiogroupStreamReader's planning logic, with the group member replaced by a stub."""

from __future__ import annotations

import asyncio
import pickle
from collections.abc import Coroutine
from typing import Any

import pyspark  # noqa: F401  (the spark extra: a missing install fails here)
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

from aiogroup.spark import source as source_module
from aiogroup.spark.member import PartitionView
from aiogroup.spark.options import parse_options
from aiogroup.spark.ranges import BatchOffset, OffsetRange
from aiogroup.spark.source import AiogroupStreamReader, KafkaRangePartition
from aiogroup.structs import TopicPartition

A0, A1 = TopicPartition("a", 0), TopicPartition("a", 1)
OPTIONS = {"kafka.bootstrap.servers": "localhost:9092", "kafka.group.id": "g", "subscribe": "a"}


class StubMember:
    """Owns A0 and A1; the test sets where they begin and end."""

    instances: list[StubMember] = []

    def __init__(self, options: Any) -> None:
        self.begins = {A0: 0, A1: 10}
        self.ends = {A0: 100, A1: 30}
        self.committed: list[BatchOffset] = []
        self.stopped = False
        StubMember.instances.append(self)

    def start(self) -> None:
        pass

    def stop(self) -> None:
        self.stopped = True

    def call(self, coro: Coroutine[Any, Any, Any], timeout: float, what: str) -> Any:
        return asyncio.run(coro)

    async def wait_assigned(self) -> None:
        pass

    async def view(self, start: BatchOffset) -> PartitionView:
        begins = {tp: start.positions.get(tp, b) for tp, b in self.begins.items()}
        return PartitionView(begins=begins, ends=dict(self.ends))

    async def owned_end_offsets(self, settle: bool = True) -> dict[TopicPartition, int]:
        return dict(self.ends)

    async def commit(self, done: BatchOffset) -> dict[TopicPartition, int]:
        self.committed.append(done)
        return dict(done.positions)


@pytest.fixture
def reader(monkeypatch: pytest.MonkeyPatch) -> AiogroupStreamReader:
    StubMember.instances.clear()
    monkeypatch.setattr(source_module, "SourceMember", StubMember)
    return AiogroupStreamReader(parse_options(OPTIONS))


def test_building_and_pickling_the_reader_joins_nothing(reader: AiogroupStreamReader) -> None:
    copy = pickle.loads(pickle.dumps(reader))
    assert StubMember.instances == []
    assert copy.options == reader.options
    reader.initialOffset()
    assert len(StubMember.instances) == 1
    shipped = pickle.loads(pickle.dumps(reader))
    assert shipped._member is None, "the group member must never travel to executors"


def test_default_read_limit_follows_max_offsets_per_trigger(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    limited = AiogroupStreamReader(parse_options({**OPTIONS, "maxOffsetsPerTrigger": "50"}))
    assert limited.getDefaultReadLimit() == ReadMaxRows(50)
    assert AiogroupStreamReader(parse_options(OPTIONS)).getDefaultReadLimit() == ReadAllAvailable()


def test_batches_cover_the_backlog_and_commit_what_spark_finished(
    reader: AiogroupStreamReader,
) -> None:
    initial = reader.initialOffset()
    assert initial == {"a": {"0": 0, "1": 10}}
    first = reader.latestOffset(initial, ReadMaxRows(60))
    assert first == {"a": {"0": 50, "1": 20}}  # 60 split 100:20 -> 50 + 10
    member = StubMember.instances[0]
    assert member.committed == [], "the initial offset is not progress"
    parts = reader.partitions(initial, first)
    assert [p.offset_range for p in parts] == [
        OffsetRange("a", 0, 0, 50),
        OffsetRange("a", 1, 10, 20),
    ]
    assert all(isinstance(p, KafkaRangePartition) for p in parts)
    second = reader.latestOffset(first, ReadAllAvailable())
    assert second == {"a": {"0": 100, "1": 30}}
    assert member.committed == [BatchOffset.from_json(first)]
    assert reader.latestOffset(second, ReadAllAvailable()) is second  # nothing new
    reader.commit(second)
    assert member.committed[-1] == BatchOffset.from_json(second)
    reader.stop()
    assert member.stopped


def test_min_rows_waits_for_enough_data(reader: AiogroupStreamReader) -> None:
    initial = reader.initialOffset()
    assert reader.latestOffset(initial, ReadMinRows(1_000)) is initial
    assert reader.latestOffset(initial, ReadMinRows(120)) == {"a": {"0": 100, "1": 30}}


def test_available_now_never_goes_past_the_prepared_ends(reader: AiogroupStreamReader) -> None:
    reader.prepareForTriggerAvailableNow()
    initial = reader.initialOffset()
    member = StubMember.instances[0]
    member.ends = {A0: 500, A1: 90}  # records produced after the run started
    end = reader.latestOffset(initial, ReadAllAvailable())
    assert end == {"a": {"0": 100, "1": 30}}
    assert reader.latestOffset(end, ReadAllAvailable()) is end


def test_report_latest_offset_is_none_before_the_member_exists(
    reader: AiogroupStreamReader,
) -> None:
    assert reader.reportLatestOffset() is None
    reader.initialOffset()
    assert reader.reportLatestOffset() == {"a": {"0": 100, "1": 30}}
