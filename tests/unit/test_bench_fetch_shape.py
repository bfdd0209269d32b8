"""benchmarks.fetch_shape's timelines: pure arithmetic over stamps, checked on its own."""

from __future__ import annotations

import pytest

from benchmarks.fetch_shape import Counts, rdkafka_timeline, timeline


def test_gaps_and_the_reads_inside_them() -> None:
    counts = Counts()
    counts.sent = [0.000, 0.030, 0.050]
    counts.answered = [0.020, 0.045]
    counts.handled = [0.022, 0.046]
    counts.returned = [0.025, 0.049, 0.060]  # two returns inside gaps, one after
    got = timeline(counts)
    assert got["in_flight"] == pytest.approx([20.0, 15.0])
    assert got["gap"] == pytest.approx([8.0, 4.0])
    assert got["returns"] == [2.0]


def test_librdkafka_protocol_log_gives_the_same_timeline() -> None:
    name = "rdkafka#consumer-1| [thrd:127.0.0.1:9092/1]: 127.0.0.1:9092/1"
    log = "\n".join(
        [
            f"%7|99.990|SEND|{name}: Sent FetchRequest (v11, 120 bytes @ 0, CorrId 4)",
            f"%7|100.000|SEND|{name}: Sent FetchRequest (v11, 120 bytes @ 0, CorrId 5)",
            f"%7|100.016|RECV|{name}: Received FetchResponse (v11, 5999583 bytes, CorrId 5, "
            "rtt 16.00ms)",
            f"%7|100.017|SEND|{name}: Sent MetadataRequest (v4, 30 bytes @ 0, CorrId 6)",
            f"%7|100.018|SEND|{name}: Sent FetchRequest (v11, 120 bytes @ 0, CorrId 7)",
            f"%7|100.030|RECV|{name}: Received FetchResponse (v11, 5572541 bytes, CorrId 7, "
            "rtt 12.00ms)",
            "not a log line",
        ]
    )
    got = rdkafka_timeline(log, 100.0, 100.1)  # the drain's span drops CorrId 4
    assert got["in_flight"] == pytest.approx([16.0, 12.0])
    assert got["gap"] == pytest.approx([2.0])
    assert got["bytes"] == [5999583.0, 5572541.0]
