"""Processing, not just delivery: concurrent, ordered handlers with safe commits.

``Processor(consumer, handler, ...)`` (or ``await consumer.process(handler, ...)``)
runs an async or sync handler per record with bounded concurrency, in partition,
key or no order, and commits per partition only the first record not yet finished
(records finished beyond it go in the commit's metadata, so a restart or the next
owner skips them).  Modules:

* ``tracker``: per-partition committable offset and finished-beyond runs (pure);
* ``offset_metadata``: the compact, size-bounded metadata format (pure);
* ``uncommitted``: the work at risk after a crash and ``max_uncommitted``'s start rule (pure);
* ``scheduler``: lanes, the ready queue and the concurrency bound (pure);
* ``retry``: the retry policy as data;
* ``dead_letter``: the dead-letter choice and its headers;
* ``handler_calls``: calling the handler (async inline, sync in a pool, timeout, drain);
* ``dead_letter_sender``: the dead-letter producer and its sends;
* ``processor``: the async shell (reading, handler tasks, commits, rebalance hooks);
* with ``transactional_producer=`` (exactly-once outputs, issue 27): ``output``
  (``Output``, what such a handler returns), ``finish_bound`` (which finishes a commit
  can represent; pure) and ``prefix_transactions`` (one transaction per committed prefix).

On a share consumer (KIP-932) ``ShareProcessor`` does the same with acknowledgements
in the place of commits:

* ``share_outcomes``: which acknowledgement ends each record, what the answers count (pure);
* ``share_processor``: its async shell (bounded acquisition, handler tasks, lock renewal).
"""

from aiogroup.processing.dead_letter import DeadLetter
from aiogroup.processing.errors import DeadLetterTopicError, ProcessingError
from aiogroup.processing.output import Output
from aiogroup.processing.processor import Handler, Processor
from aiogroup.processing.retry import RetryPolicy
from aiogroup.processing.scheduler import Ordering
from aiogroup.processing.share_processor import ShareProcessor

__all__ = [
    "DeadLetter",
    "DeadLetterTopicError",
    "Handler",
    "Ordering",
    "Output",
    "ProcessingError",
    "Processor",
    "RetryPolicy",
    "ShareProcessor",
]
