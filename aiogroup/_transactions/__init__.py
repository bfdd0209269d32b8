"""Transactional offset commits (KIP-447): pure decisions and the aiokafka adapter.

``outcomes`` decides (input checks, what each broker answer means) without I/O;
``committer`` sends the two requests through aiokafka's transactional producer.
The public entry point is :mod:`aiogroup.transactions`.
"""
