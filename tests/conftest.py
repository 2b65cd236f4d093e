"""Shared fixtures: one local SparkSession per test session, real redis-server pairs on loopback."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"


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
