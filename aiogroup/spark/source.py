"""``spark.readStream.format("aiogroup")``: a PySpark streaming data source.

Process model (see docs/spark.md):

* Spark constructs :class:`AiogroupDataSource` while analysing the query, in a
  short-lived Python worker; the options are validated there, so bad ones fail
  ``load()``.
* The stream reader is built twice.  One copy lives in the streaming-source process
  for the whole query: it answers ``initialOffset``/``latestOffset``/``partitions``/
  ``commit`` and, from its first offset call on, owns the group member.  Another copy
  is built in a planning worker only to be pickled into the executors' read function;
  that is why nothing may join the group in ``__init__``.
* Executors call :meth:`AiogroupStreamReader.read` with one planned offset range and
  read it with a group-less consumer.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from aiogroup.spark.member import SourceMember
from aiogroup.spark.options import SourceOptions, parse_options
from aiogroup.spark.partition_reader import read_range
from aiogroup.spark.ranges import BatchOffset, OffsetRange, advance, plan_ranges
from aiogroup.spark.schema import spark_schema

__all__ = ["AiogroupDataSource", "AiogroupStreamReader", "KafkaRangePartition", "register"]

log = logging.getLogger("aiogroup.spark")


class KafkaRangePartition(InputPartition):
    """One Spark input partition: a ``[from, until)`` range of one Kafka partition."""

    def __init__(self, offset_range: OffsetRange) -> None:
        super().__init__(offset_range)
        self.offset_range = offset_range


class AiogroupStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch planning through a consumer-group member; see the module docstring."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._member: SourceMember | None = None
        self._initial: dict[str, Any] | None = None
        # Trigger.AvailableNow: the end offset no batch may go past, per partition.
        self._targets: dict[Any, int] | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Executors get the options only; membership never travels.
        return {"options": self.options, "_member": None, "_initial": None, "_targets": None}

    # -- the group member, started lazily ----------------------------------------------

    def _started_member(self) -> SourceMember:
        if self._member is None:
            member = SourceMember(self.options)
            member.start()
            self._member = member
            member.call(
                member.wait_assigned(),
                self.options.start_timeout_s,
                f"waiting for a partition assignment from group {self.options.group_id!r} "
                "(startTimeoutMs)",
            )
        return self._member

    @property
    def _timeout(self) -> float:
        return self.options.start_timeout_s

    # -- offsets ---------------------------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        member = self._started_member()
        view = member.call(member.view(BatchOffset()), self._timeout, "planning initial offsets")
        self._initial = BatchOffset(dict(view.begins)).to_json()
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        member = self._started_member()
        self._targets = member.call(
            member.owned_end_offsets(), self._timeout, "reading end offsets"
        )

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        member = self._started_member()
        begin = BatchOffset.from_json(start)
        # Spark asks for the next batch only after the previous one (ending at `start`)
        # is in its commit log, so this is the earliest moment to tell the group - and
        # for the last batch of an availableNow run, the only one.
        if start != self._initial:
            member.call(member.commit(begin), self._timeout, "committing offsets")
        view = member.call(member.view(begin), self._timeout, "planning a batch")
        ends = dict(view.ends)
        if self._targets is not None:
            for tp, end in ends.items():
                # Partitions gained during the run are bounded by their end when gained.
                target = self._targets.setdefault(tp, end)
                ends[tp] = min(end, target)
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        if isinstance(limit, ReadMinRows):
            available = sum(max(0, ends[tp] - b) for tp, b in view.begins.items())
            if available < limit.min_rows:
                return start
        end = advance(begin, view.begins, ends, max_rows)
        return start if end is begin else end.to_json()

    def reportLatestOffset(self) -> dict[str, Any] | None:
        member = self._member
        if member is None:
            return None
        ends = member.call(member.owned_end_offsets(settle=False), self._timeout, "reading ends")
        return BatchOffset(ends).to_json()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        ranges = plan_ranges(BatchOffset.from_json(start), BatchOffset.from_json(end))
        return [KafkaRangePartition(r) for r in ranges]

    def commit(self, end: dict[str, Any]) -> None:
        if self._member is not None:
            self._member.call(
                self._member.commit(BatchOffset.from_json(end)), self._timeout, "committing"
            )

    def stop(self) -> None:
        if self._member is not None:
            self._member.stop()

    # -- executors -----------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, KafkaRangePartition)
        return read_range(self.options, partition.offset_range)


class AiogroupDataSource(DataSource):
    """``format("aiogroup")``: Kafka records through a consumer group, Spark-Kafka schema."""

    def __init__(self, options: Any) -> None:
        super().__init__(options)
        self.source_options = parse_options(options)

    @classmethod
    def name(cls) -> str:
        return "aiogroup"

    def schema(self) -> Any:
        return spark_schema()

    def streamReader(self, schema: Any) -> AiogroupStreamReader:
        return AiogroupStreamReader(self.source_options)


def register(spark: Any) -> None:
    """Make ``format("aiogroup")`` available in ``spark`` (a SparkSession)."""
    spark.dataSource.register(AiogroupDataSource)
