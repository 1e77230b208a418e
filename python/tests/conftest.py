"""Shared set-up of the suite.

Unit tests (test_unit.py) need nothing but Python. Integration tests
(test_integration.py, marker ``integration``) drive the real engine this
package carries, on a real container engine, with the fake model; they run
when SANDBOX_AGENT_TEST_INTEGRATION=1 (the Go test TestPythonPackage sets
it after installing the wheel into a fresh venv) and skip otherwise, except
that under CI=true a skip is a failure.
"""

import os

import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "integration: needs the real engine and a container engine")


def pytest_collection_modifyitems(config, items):
    if os.environ.get("SANDBOX_AGENT_TEST_INTEGRATION") == "1":
        return
    if os.environ.get("CI") == "true" and os.environ.get("SANDBOX_AGENT_TEST_UNIT_ONLY") != "1":
        raise pytest.UsageError("CI=true: the integration tests must run (set SANDBOX_AGENT_TEST_INTEGRATION=1, "
                                "or SANDBOX_AGENT_TEST_UNIT_ONLY=1 for a unit-only run)")
    skip = pytest.mark.skip(reason="integration: set SANDBOX_AGENT_TEST_INTEGRATION=1")
    for item in items:
        if "integration" in item.keywords:
            item.add_marker(skip)
