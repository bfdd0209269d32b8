"""``ShareProcessor``: the processing layer on a share consumer (KIP-932), with
acknowledgements in the place of commits.

The async shell around the pure parts: it takes records from an explicit-mode
:class:`~aiogroup.share.ShareConsumer` while it holds fewer than ``2 x concurrency``
(so records do not wait acquired until their locks run out), lets the
:class:`~aiogroup.processing.scheduler.Scheduler` release them under the ordering
mode, runs the handler tasks, and ends each record with the acknowledgement
:func:`~aiogroup.processing.share_outcomes.acknowledgement_for` names.  While it
holds a record it keeps the record's lock (RENEW: the consumer's auto-renew rule,
switched on for the processor's run); :class:`~aiogroup.processing.share_outcomes.ShareTally` counts
what the broker confirmed, so a record whose lock was lost is never counted as
accepted.  Handler calls and dead letters are the shared parts
(:mod:`.handler_calls`, :mod:`.dead_letter_sender`).

Why not ``Processor`` taking either consumer: the group processor's substance -
committed offsets that never pass unfinished work, finished-beyond metadata,
rebalance hooks - has no counterpart here: a share group has no offsets to commit
and no partition ownership to hand over.  What both need is shared, not copied.
See docs/usage.md, "Processing on a share consumer".
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from aiogroup._fetch.share_acknowledgements import InvalidAcknowledgement
from aiogroup._protocol.share_types import AcknowledgeType
from aiogroup._support.timeouts import wait_for
from aiogroup.errors import ConfigurationError, ConsumerStoppedError, IllegalStateError
from aiogroup.processing.dead_letter import DeadLetter
from aiogroup.processing.dead_letter_sender import DeadLetterSender
from aiogroup.processing.errors import ProcessingError
from aiogroup.processing.handler_calls import Handler, HandlerCalls, check_handler, drain
from aiogroup.processing.retry import RetryPolicy
from aiogroup.processing.scheduler import ORDERINGS, Ordering, Scheduler, Work, lane_of
from aiogroup.processing.share_outcomes import (
    Outcome,
    ShareTally,
    acknowledgement_for,
    check_on_failure,
)
from aiogroup.structs import TopicPartition

if TYPE_CHECKING:
    from aiogroup.share.consumer import ShareConsumer, ShareRecord

__all__ = ["ShareProcessor"]

log = logging.getLogger("aiogroup.processing")

#: How long one read waits for records: also how soon a stop() is noticed by it.
_POLL_MS = 100


def _ignore_result(task: asyncio.Task[Any]) -> None:
    """A flush's failure is logged by nobody else: the next commit tries again."""
    if not task.cancelled() and task.exception() is not None:
        log.debug("share processor: a flush failed: %r", task.exception())


def _positive_ms(name: str, value: object, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name} must be a number of milliseconds > 0, got {value!r}")


class ShareProcessor:
    """Runs ``handler`` on a share consumer's records, concurrently, acknowledging each.

    ``run()`` until ``stop()`` (or ``consumer.stop()``); with ``on_failure="stop"`` a
    record whose handler failed every attempt makes ``run()`` raise
    :class:`ProcessingError` (that record RELEASEd: it is delivered again).
    """

    def __init__(
        self,
        consumer: ShareConsumer,
        handler: Handler,
        *,
        concurrency: int = 100,
        ordering: Ordering = "unordered",
        retry: RetryPolicy | None = None,
        on_failure: str | DeadLetter = "stop",
        record_timeout_ms: int | None = None,
        drain_timeout_ms: int = 30_000,
    ) -> None:
        check_handler(handler)
        if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
            raise ValueError(f"concurrency must be an int >= 1, got {concurrency!r}")
        if ordering not in ORDERINGS:
            raise ValueError(f"ordering must be one of {ORDERINGS}, got {ordering!r}")
        if retry is None:
            retry = RetryPolicy()
        if not isinstance(retry, RetryPolicy):
            raise TypeError(f"retry must be a RetryPolicy, got {retry!r}")
        check_on_failure(on_failure)
        _positive_ms("record_timeout_ms", record_timeout_ms, allow_none=True)
        _positive_ms("drain_timeout_ms", drain_timeout_ms)
        if getattr(consumer, "acknowledgement_mode", None) != "explicit":
            raise ConfigurationError(
                "ShareProcessor needs ShareConsumer(acknowledgement_mode='explicit'): in "
                "implicit mode the consumer accepts every record handed out at its next "
                "poll, while its handler may still be running (or fail)"
            )
        self._consumer = consumer
        self._ordering: Ordering = ordering
        self._retry = retry
        self._on_failure = on_failure
        self._drain_timeout = drain_timeout_ms / 1000
        record_timeout = None if record_timeout_ms is None else record_timeout_ms / 1000
        self._calls = HandlerCalls(handler, threads=concurrency, record_timeout=record_timeout)
        self._sched = Scheduler(concurrency)
        #: Most records held at once (running, retrying, or waiting for a lane).
        self._held_limit = 2 * concurrency
        self._held: set[Work] = set()
        self._tasks: dict[Work, asyncio.Task[None]] = {}
        self._dead_letters: DeadLetterSender | None = None
        self._tally = ShareTally()
        self._failure: ProcessingError | None = None
        self._stop_event = asyncio.Event()
        #: Set when a held record ended (room to take more) or on stop.
        self._room = asyncio.Event()
        self._running = False
        self._done: asyncio.Future[None] | None = None
        #: Stopped by ``consumer.stop()``: its close sends the last acknowledgements.
        self._consumer_closing = False
        self._flushing: asyncio.Task[Any] | None = None
        self._warned_null_key = False
        self._finished = 0
        self._retried = 0
        self._failed = 0
        self._dead_lettered = 0

    # -- public -----------------------------------------------------------------------

    async def run(self) -> None:
        """Process until :meth:`stop` or ``consumer.stop()``; raises ProcessingError on a
        record that failed every attempt with ``on_failure="stop"``."""
        if self._running or self._done is not None:
            raise RuntimeError("ShareProcessor.run() can be called once")
        self._running = True
        loop = asyncio.get_running_loop()
        self._done = loop.create_future()
        consumer = self._consumer
        listeners = consumer._result_listeners
        try:
            consumer._running()  # started, not stopped: else the error names which
            await self._open_dead_letter()
            listeners.append(self._tally.answered)
            consumer._stop_hooks.append(self._stop_for_close)
            consumer.metrics.processing = self.metrics
            if consumer.max_poll_records > self._held_limit:
                log.info(
                    "share processor: max_poll_records (%d) is above 2 x concurrency (%d): "
                    "records acquired beyond that wait in the consumer's buffer, unrenewed",
                    consumer.max_poll_records,
                    self._held_limit,
                )
            consumer._keep_locks(True)
            try:
                await self._read_loop()
            finally:
                await self._shutdown()
                try:
                    consumer._keep_locks(False)
                except (ConsumerStoppedError, IllegalStateError):
                    pass  # stopped with it: its fetcher is gone
        finally:
            if self._stop_for_close in consumer._stop_hooks:
                consumer._stop_hooks.remove(self._stop_for_close)
            # Stopped by consumer.stop(): its close answers the last acknowledgements
            # after this returns, and they still count here.
            if self._tally.answered in listeners and not self._consumer_closing:
                listeners.remove(self._tally.answered)
            if consumer.metrics.processing == self.metrics:
                consumer.metrics.processing = None
            self._running = False
            if self._dead_letters is not None:
                await self._dead_letters.close()
            self._calls.close()
            if not self._done.done():
                self._done.set_result(None)
        if self._failure is not None:
            raise self._failure

    async def stop(self) -> None:
        """Stop dispatching, drain in-flight handlers (``drain_timeout_ms``, then cancel),
        RELEASE what did not finish, send every acknowledgement, return.

        Before ``run()``: that ``run()`` then returns at once.  The consumer, if it runs
        on, acquires nothing more until the application polls it again (no read-ahead
        ShareFetch takes the released records back for a consumer nobody polls)."""
        self._hold_consumer()
        self._stop_event.set()
        self._room.set()
        if self._done is not None:
            await asyncio.shield(self._done)

    async def _stop_for_close(self) -> None:
        """``consumer.stop()`` began: stop as :meth:`stop` does, but leave the last
        acknowledgements to the consumer's close (epoch -1), which sends them and ends
        the sessions in one request - a separate flush first would let the consumer's
        next ShareFetch acquire the released records again, raising their counts."""
        self._consumer_closing = True
        await self.stop()

    def metrics(self) -> dict[str, Any]:
        """Counters and gauges of this processor (docs/usage.md lists them)."""
        now = asyncio.get_running_loop().time()
        starts = [w.started for w in self._sched.in_flight if w.started is not None]
        return {
            "in_flight": len(self._sched.in_flight),
            "queued": self._sched.queued,
            "held": len(self._held),
            "finished": self._finished,
            "retried": self._retried,
            "failed": self._failed,
            "dead_lettered": self._dead_lettered,
            **self._tally.as_dict(),
            "oldest_in_flight_age_s": (now - min(starts)) if starts else None,
        }

    # -- reading and dispatching ---------------------------------------------------------

    async def _read_loop(self) -> None:
        consumer = self._consumer
        while not self._stop_event.is_set() and self._failure is None:
            room = self._held_limit - len(self._held)
            if room <= 0:
                # Full: wait for a held record to end (woken at once), not for a poll.
                self._room.clear()
                try:
                    await wait_for(self._room.wait(), 1.0)
                except asyncio.TimeoutError:
                    pass
                continue
            try:
                batch = await consumer.getmany(timeout_ms=_POLL_MS, max_records=room)
            except ConsumerStoppedError:
                return
            if batch and self._stop_event.is_set():
                # Taken by a poll that began before stop(): back to the broker with the
                # rest (the consumer fetches nothing more meanwhile).
                self._accept(batch, dispatch=False)
            elif batch:
                self._accept(batch)

    def _accept(
        self, batch: Mapping[TopicPartition, list[ShareRecord]], *, dispatch: bool = True
    ) -> None:
        for tp, records in batch.items():
            for record in records:
                key = record.key
                if self._ordering == "key" and key is None and not self._warned_null_key:
                    self._warned_null_key = True
                    log.warning(
                        "ordering='key': records without a key (first: %s[%d]@%d) are "
                        "processed in partition order among themselves",
                        tp.topic,
                        tp.partition,
                        record.offset,
                    )
                work = Work(tp, record.offset, lane_of(self._ordering, tp, key, record.offset))
                work.record = record
                self._held.add(work)
                self._sched.add(work)
        if dispatch:
            self._dispatch()

    def _dispatch(self) -> None:
        if self._failure is not None or self._stop_event.is_set():
            return
        loop = asyncio.get_running_loop()
        for work in self._sched.take():
            work.started = loop.time()
            self._tasks[work] = loop.create_task(self._work(work), name="aiogroup-share-handler")

    async def _work(self, work: Work) -> None:
        """A handler task: ``work``, then the next record the slot it frees releases, until
        none is ready (as Processor's: a task per record costs the loop more than many
        handlers' own work).  After stop() or a failure no next record is taken, so a
        task's end is its record's end there, which is what the drain waits for."""
        task = asyncio.current_task()
        assert task is not None
        next_work: Work | None = work
        while next_work is not None:
            await self._handle(next_work)
            next_work = None
            if self._failure is None and not self._stop_event.is_set():
                next_work = self._sched.take_one()
            if next_work is not None:
                next_work.started = asyncio.get_running_loop().time()
                self._tasks[next_work] = task

    # -- handling ------------------------------------------------------------------------

    async def _handle(self, work: Work) -> None:
        outcome: Outcome = "cancelled"
        attempt = 0
        try:
            while True:
                attempt += 1
                try:
                    await self._calls.attempt(work.record)
                except Exception as exc:
                    delay = self._retry.delay_after(attempt)
                    if delay is None:
                        outcome = await self._failed_record(work, exc, attempt)
                        return
                    self._retried += 1
                    log.info(
                        "handler failed on %s[%d]@%d (attempt %d of %d, retrying in %gs): %r",
                        work.tp.topic,
                        work.tp.partition,
                        work.offset,
                        attempt,
                        self._retry.attempts,
                        delay,
                        exc,
                    )
                    await asyncio.sleep(delay)
                    continue
                self._finished += 1
                outcome = "finished"
                return
        finally:
            # Cancelled (stop()'s drain ran out) included: the outcome says which.
            self._settle(work, outcome)
            self._tasks.pop(work, None)
            self._sched.done(work)
            self._room.set()

    async def _failed_record(self, work: Work, exc: Exception, attempts: int) -> Outcome:
        self._failed += 1
        if self._dead_letters is not None:
            try:
                await self._dead_letters.send(work.record, exc, attempts)
            except Exception as produce_error:
                log.error(
                    "dead-lettering %s[%d]@%d failed",
                    work.tp.topic,
                    work.tp.partition,
                    work.offset,
                    exc_info=produce_error,
                )
                self._stop_for(work, produce_error, attempts)
                return "failed"
            self._dead_lettered += 1
            return "dead_lettered"
        if self._on_failure == "stop":
            self._stop_for(work, exc, attempts)
        else:
            log.warning(
                "handler failed on %s[%d]@%d after %d attempt(s) (delivery %d): %s it: %r",
                work.tp.topic,
                work.tp.partition,
                work.offset,
                attempts,
                work.record.delivery_count,
                self._on_failure,
                exc,
            )
        return "failed"

    def _hold_consumer(self) -> None:
        """Stopping: the consumer's next ShareFetch waits for the application's next poll,
        so the records this processor RELEASEs are not acquired again by a consumer that
        nobody reads (they would sit locked to it, then come back to the next member
        with their delivery count raised once more)."""
        if self._running and not self._consumer_closing:
            self._consumer._hold_fetching()

    def _stop_for(self, work: Work, exc: BaseException, attempts: int) -> None:
        if self._failure is None:
            self._hold_consumer()
            failure = ProcessingError(work.tp, work.offset, attempts, exc)
            failure.__cause__ = exc
            self._failure = failure
            log.error("%s; stopping the share processor (the record is released)", failure)
            self._stop_event.set()
            self._room.set()

    def _settle(self, work: Work, outcome: Outcome) -> None:
        """End a held record with the acknowledgement its outcome calls for."""
        if work not in self._held:
            return
        self._held.discard(work)
        if outcome == "cancelled" and self._consumer_closing:
            # The consumer's close RELEASEs what is handed out and not acknowledged, in
            # the request that ends the session: sent now, the RELEASE could ride on a
            # ShareFetch that acquires the record again for this closing consumer.
            return
        kind = acknowledgement_for(outcome, self._on_failure)
        try:
            self._consumer.acknowledge(work.record, kind)
            if kind is AcknowledgeType.RELEASE:
                self._flush_soon()
        except InvalidAcknowledgement as exc:
            # The consumer no longer holds it (its session ended, or it was delivered
            # again): the broker has it back, whatever the handler did.
            self._tally.refused()
            log.info("share processor: %s of a record not held any more: %s", kind.name, exc)
        except (ConsumerStoppedError, IllegalStateError):
            pass  # the consumer stopped: its close released what was not acknowledged

    def _flush_soon(self) -> None:
        """Send a RELEASE in a ShareAcknowledge of its own (a commit), not riding on the
        next ShareFetch: a fetch carrying it may acquire the same record again in its
        answer - for this consumer, which is what the RELEASE was meant to avoid."""
        if self._flushing is not None and not self._flushing.done():
            return  # the commit under way takes it (it waits for what is in flight)
        try:
            task = self._consumer.commit_async()
        except (ConsumerStoppedError, IllegalStateError):
            return
        task.add_done_callback(_ignore_result)
        self._flushing = task

    # -- locks ---------------------------------------------------------------------------

    # -- dead letters and shutdown ---------------------------------------------------------

    async def _open_dead_letter(self) -> None:
        dl = self._on_failure
        if not isinstance(dl, DeadLetter):
            return
        bootstrap, client_id, options = self._consumer._client_settings()
        sender = DeadLetterSender(
            dl, bootstrap_servers=bootstrap, client_id=client_id, client_options=options
        )
        await sender.open(await self._consumer.topics())
        self._dead_letters = sender

    async def _shutdown(self) -> None:
        """Stop dispatching; drain in-flight handlers; RELEASE what did not run or finish;
        send every acknowledgement."""
        self._stop_event.set()
        in_flight = list(self._sched.in_flight)
        self._sched.drop({w.tp for w in self._held})
        for work in [w for w in self._held if w not in self._sched.in_flight]:
            self._settle(work, "cancelled")  # waiting, never started: back to the broker
        tasks = {self._tasks[w] for w in in_flight if w in self._tasks}
        await drain(tasks, self._drain_timeout, self._drain_timeout, "share processor stop")
        for work in list(self._held):  # a handler that ignored its cancellation
            self._settle(work, "cancelled")
        if self._consumer_closing:
            return  # the consumer's close sends them
        try:
            await self._consumer.commit()
        except (ConsumerStoppedError, IllegalStateError):
            pass
        except Exception as exc:
            log.warning("share processor: sending the last acknowledgements failed: %r", exc)
