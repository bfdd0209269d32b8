"""Positions for partitions that have none: ListOffsets by the reset strategy.

A partition needs a reset when it has no committed offset, when a seek_to_* asked
for one, or when a fetch at its position came back OFFSET_OUT_OF_RANGE.  Resets of
one strategy share a ListOffsets round (one request per leader); the answer is
applied only if the partition is still assigned, in the same epoch and still
waiting, because the application may have sought or the group rebalanced meanwhile.
With strategy ``none`` nothing is asked: the application is told once per epoch.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from aiokafka.errors import (
    NoOffsetForPartitionError,
    OffsetOutOfRangeError,
    TopicAuthorizationFailedError,
)

from aiogroup._fetch import offset_lookups as _offsets
from aiogroup._state.subscription import Assignment, FetchStatus, PartitionState, SubscriptionState
from aiogroup.structs import OffsetResetStrategy, TopicPartition

__all__ = ["PositionResets"]

log = logging.getLogger("aiogroup.fetcher")


class PositionResets:
    """Starts and applies resets; the fetcher calls ``start`` on every planning round."""

    def __init__(
        self,
        client: Any,
        subscription: SubscriptionState,
        *,
        read_committed: bool,
        timeout: float,
        spawn: Callable[[Coroutine[Any, Any, None]], None],
        report: Callable[[BaseException], None],
        wake: Callable[[], None],
        retry_later: Callable[[], None],
    ) -> None:
        self._client = client
        self._sub = subscription
        self._read_committed = read_committed
        self._timeout = timeout
        self._spawn = spawn
        self._report = report
        self._wake = wake
        self._retry_later = retry_later
        self._resetting: set[TopicPartition] = set()
        #: (partition, epoch) already told "no offset": once per epoch is enough.
        self._reported: set[tuple[TopicPartition, int]] = set()

    def start(self, assignment: Assignment) -> None:
        """Ask for positions of every partition awaiting a reset and not yet asked."""
        groups: dict[OffsetResetStrategy, list[PartitionState]] = {}
        for tp in assignment.needing_reset():
            if tp in self._resetting:
                continue
            st = assignment.state(tp)
            if st.reset_strategy is OffsetResetStrategy.NONE:
                if (tp, st.epoch) not in self._reported:
                    self._reported.add((tp, st.epoch))
                    self._report(
                        NoOffsetForPartitionError(
                            f"{tp.topic}-{tp.partition} has no valid position and "
                            "auto_offset_reset is 'none'; seek() to a position first"
                        )
                    )
                continue
            groups.setdefault(st.reset_strategy, []).append(st)
        for strategy, states in groups.items():
            for st in states:
                self._resetting.add(st.tp)
            self._spawn(self._reset(strategy, [(st, st.epoch) for st in states]))

    def out_of_range(self, st: PartitionState, epoch: int, offset: int) -> bool:
        """A fetch at ``offset`` was out of range; True when it was only a read-ahead.

        A read-ahead fetch (past the position) is retried once the application has
        caught up with it; a fetch at the position resets it.
        """
        if st.epoch != epoch or st.position != offset:
            return True
        strategy = st.reset_strategy
        st.await_reset()
        if strategy is OffsetResetStrategy.NONE:
            self._reported.add((st.tp, st.epoch))
            self._report(OffsetOutOfRangeError({st.tp: offset}))
        else:
            log.info("offset %d of %s is out of range; resetting (%s)", offset, st.tp, strategy)
        return False

    async def _reset(
        self, strategy: OffsetResetStrategy, states: list[tuple[PartitionState, int]]
    ) -> None:
        try:
            found = await _offsets.list_offsets(
                self._client,
                {st.tp: strategy.list_offsets_timestamp for st, _ in states},
                read_committed=self._read_committed,
                timeout=self._timeout,
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("resetting %d partitions (%s) failed: %r", len(states), strategy, exc)
            if isinstance(exc, TopicAuthorizationFailedError):
                self._report(exc)
            self._retry_later()
            return
        finally:
            for st, _ in states:
                self._resetting.discard(st.tp)
            self._wake()
        assignment = self._sub.assignment
        for st, epoch in states:
            if (
                assignment is None
                or assignment.get(st.tp) is not st
                or st.epoch != epoch
                or st.status is not FetchStatus.AWAITING_RESET
            ):
                continue  # reassigned, sought or revoked while we asked
            value = found.get(st.tp)
            st.seek(value.offset if value is not None else 0)
