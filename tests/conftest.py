"""Hypothesis profiles: how hard the property tests search.

``dev`` (the default) keeps ``make test-unit`` well under a minute for the edit-test
loop; ``thorough`` is what ``make test`` (and so CI) runs: five times the examples
for the assignor properties and the listener-contract state machine.  Pick one with
``HYPOTHESIS_PROFILE=thorough``.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

settings.register_profile("dev", max_examples=100, deadline=None)
settings.register_profile("thorough", max_examples=500, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


def pytest_configure(config: pytest.Config) -> None:
    """Markers of the broker matrix (make test deselects kafka_cluster on Tansu)."""
    config.addinivalue_line(
        "markers", "kafka_cluster: needs the 3-node Apache Kafka cluster (Java + make install)"
    )
