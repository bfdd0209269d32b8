"""Side-by-side benchmarks of aiogroup and its peers, on the embedded broker or Apache Kafka.

``python -m benchmarks`` (or ``make bench``) runs every scenario, each client at
least three times, and writes ``docs/benchmarks.md``, the plots next to it and the
raw numbers in ``docs/benchmarks/results.json``.  Every client measurement runs in
its own subprocess so that CPU time and peak RSS belong to that client alone.
"""
