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


#: Tests that must not share the machine with each other run on one xdist worker, in
#: order (``make test`` runs ``pytest -n N --dist loadgroup``): each name below is one
#: group.  Every other test is spread over the workers; that is safe because each worker
#: starts its own broker (the session fixture) and every test uses its own topics and
#: group ids.  Without xdist the marks do nothing.
SERIAL_GROUPS = {
    # Spark sessions are JVMs of their own, started per module: one worker keeps them.
    "spark": "spark",
    # Three Kafka JVMs per test (failover, racks): heavy, and judged by recovery time.
    "kafka_cluster": "kafka_cluster",
}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Put the tests that cannot share the machine into their xdist groups.

    Runs before xdist reads the ``xdist_group`` marks.  The chaos scenarios (timing:
    SIGSTOP, connection cuts, session-timeout arithmetic) are one group; Spark and the
    3-node cluster are one group each.
    """
    for item in items:
        if item.get_closest_marker("xdist_group"):
            continue
        if item.path.parent.name == "chaos":
            item.add_marker(pytest.mark.xdist_group("chaos"))
            continue
        for marker, group in SERIAL_GROUPS.items():
            if item.get_closest_marker(marker):
                item.add_marker(pytest.mark.xdist_group(group))
                break
