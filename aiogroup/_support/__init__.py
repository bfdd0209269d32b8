"""Small asyncio and client plumbing every wing uses, deciding nothing about groups.

- ``timeouts``: bounded waits that never swallow a cancellation.
- ``supervision``: task scopes per life and per generation; a crashed child is re-raised.
- ``bootstrap_errors``: why a bootstrap failed, in words (authentication, TLS, listener).
- ``redaction``: which options are secret and how they print, in reprs and logs.
- ``call_arguments``: pure checks of the arguments of ``GroupConsumer``'s calls.
- ``lifecycle``: the consumer's states and which calls each of them allows (pure).
"""
