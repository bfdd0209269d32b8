"""Transactional offset commits (KIP-447): pure decisions and the aiokafka adapter.

``outcomes`` decides (input checks, what each broker answer means) without I/O;
``committer`` sends the two requests through aiokafka's transactional producer;
``deliveries`` keeps a transform's sends; ``pacing`` holds the next transaction's
first partition until the previous one's markers are likely written.
The public entry point is :mod:`aiogroup.transactions`.
"""
