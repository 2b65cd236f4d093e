"""Shared fixtures: one local SparkSession per test session, real redis-server pairs on loopback."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
"""Real captures (Pika 4.0 INFO and a live pair, a broker-written RocketMQ commit log): see each NOTICE.md."""


@pytest.fixture(scope="session")
def spark():  # type: ignore[no-untyped-def]
    from audit.diff.spark import get_spark

    session = get_spark()
    yield session


@pytest.fixture(scope="session")
def redis_pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[object, object]]:
    """A real master and replica (`replicaof`) shared by the tests that only read or use their own db."""
    from audit.local.redis_server import start_pair

    master, replica = start_pair(tmp_path_factory.mktemp("redis-pair"))
    yield master, replica
    replica.stop()
    master.stop()


@pytest.fixture()
def fresh_pair(tmp_path: Path) -> Iterator[tuple[object, object]]:
    """A pair of one's own, for tests that plant divergences or change server settings."""
    from audit.local.redis_server import start_pair

    master, replica = start_pair(tmp_path / "servers")
    yield master, replica
    replica.stop()
    master.stop()


@pytest.fixture()
def dirfiles_kind(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The tests' own kind (tests/kinds/dirfiles.py), registered for one test."""
    from audit.kernel.kind import registered_kinds

    monkeypatch.setenv("REPLICA_AUDIT_KINDS", "dirfiles=tests.kinds.dirfiles")
    registered_kinds.cache_clear()
    yield
    monkeypatch.delenv("REPLICA_AUDIT_KINDS")
    registered_kinds.cache_clear()


# -- property and fuzz tests (hypothesis) -----------------------------------------------------------------
# `ci`: the fixed budget the normal suite runs (derandomized, so every run tries the same inputs);
# `fuzz`: `make fuzz`, many more random examples, and the tests marked `fuzz` run too.
from hypothesis import HealthCheck, settings  # noqa: E402

_SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
settings.register_profile("ci", derandomize=True, deadline=None, database=None, suppress_health_check=_SLOW_OK)
settings.register_profile("fuzz", deadline=None, suppress_health_check=_SLOW_OK, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if settings.get_current_profile_name() == "fuzz":
        return
    skip = pytest.mark.skip(reason="long fuzzing: run by `make fuzz`")
    for item in items:
        if item.get_closest_marker("fuzz") is not None:
            item.add_marker(skip)
