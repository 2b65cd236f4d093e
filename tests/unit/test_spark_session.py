"""The session's settings (audit/diff/spark.py): what a local driver gets that a cluster's does not."""

from __future__ import annotations

import pytest

from audit.diff import spark as session
from audit.errors import ConfigError


@pytest.fixture
def no_given_settings(monkeypatch):  # type: ignore[no-untyped-def]
    for name in ("REPLICA_AUDIT_SPARK_CONF", "REPLICA_AUDIT_SPARK_MASTER", "PYSPARK_GATEWAY_PORT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(session, "_overrides", {})


@pytest.mark.usefixtures("no_given_settings")
@pytest.mark.parametrize(
    ("master", "later_c2"), [("local[*]", True), ("local[2]", True), ("spark://host:7077", False), ("yarn", False)]
)
def test_only_a_local_driver_compiles_later(monkeypatch, master: str, later_c2: bool) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("REPLICA_AUDIT_SPARK_MASTER", master)
    options = session.session_conf()["spark.driver.extraJavaOptions"].split()
    assert session.log4j_option() in options
    assert all(o in options for o in session.LOCAL_JIT_OPTIONS) is later_c2
    assert any(o in options for o in session.LOCAL_JIT_OPTIONS) is later_c2


def test_the_running_driver_jvm_has_the_thresholds(spark) -> None:  # type: ignore[no-untyped-def]
    # asked of HotSpot itself: an option it did not take (a typo, a JDK without it) would not show here
    jvm = spark.sparkContext._jvm
    bean = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(
        jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean")
    )
    for option in session.LOCAL_JIT_OPTIONS:
        name, value = option.removeprefix("-XX:").split("=")
        assert bean.getVMOption(name).getValue() == value


def test_an_empty_arrow_table_keeps_its_schema(spark) -> None:  # type: ignore[no-untyped-def]
    import pyarrow as pa

    schema = pa.schema([("db", pa.int32()), ("key", pa.binary()), ("category", pa.string())])
    empty = session.arrow_frame(spark, schema.empty_table())
    assert empty.collect() == [] and empty.columns == ["db", "key", "category"]
    rows = session.arrow_frame(spark, pa.Table.from_pylist([{"db": 0, "key": b"k", "category": "x"}], schema=schema))
    assert [tuple(r) for r in rows.collect()] == [(0, bytearray(b"k"), "x")]


def test_default_parallelism_of_a_classic_session_is_the_context_s(spark) -> None:  # type: ignore[no-untyped-def]
    assert not session.is_connect(spark)
    assert session.default_parallelism(spark) == spark.sparkContext.defaultParallelism


@pytest.mark.parametrize("master", ["local", "local[2]", "local[*]", "local[2,3]", "local-cluster[2,1,1024]", "yarn"])
def test_master_forms_spark_takes_are_accepted(master: str) -> None:
    session.check_master(master)


@pytest.mark.parametrize("master", ["bogus://x", "local[", "spark:/h:7077", "yarn-client", ""])
def test_a_master_spark_would_not_take_is_a_config_error_naming_it(master: str) -> None:
    with pytest.raises(ConfigError, match="not a Spark master URL"):
        session.check_master(master)


def test_a_standalone_master_must_answer_on_its_port() -> None:
    import socket

    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        session.check_master(f"spark://127.0.0.1:{port}")
        with pytest.raises(ConfigError, match=r"no Spark master answers at 127\.0\.0\.1:1 "):
            session.check_master(f"spark://127.0.0.1:{port},127.0.0.1:1")  # every standby is checked


@pytest.mark.usefixtures("no_given_settings")
@pytest.mark.parametrize(
    ("variable", "value", "said"),
    [
        ("REPLICA_AUDIT_SPARK_MASTER", "bogus://x", "REPLICA_AUDIT_SPARK_MASTER: spark master bogus://x: not a Spark"),
        ("REPLICA_AUDIT_SPARK_CONF", "a=1;novalue;", "REPLICA_AUDIT_SPARK_CONF: 'novalue': expected key=value"),
    ],
)
def test_the_environment_s_spark_settings_are_checked_as_the_options_are(
    monkeypatch, variable: str, value: str, said: str
) -> None:  # type: ignore[no-untyped-def]
    # a bad master in the variable met the JVM's "Master must either be yarn or start with spark..." stack
    # trace after the snapshots; a conf entry without '=' was dropped without a word
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError, match=said):
        session.configure()
    monkeypatch.delenv(variable)
    session.configure()


def test_a_driver_jvm_starts_without_log_lines_on_stderr() -> None:
    # pyspark's driver counts as a shell: Spark printed "Setting default log level" and a hint at every
    # session's start, on the stderr of a quiet (-q) run too
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    env = {k: v for k, v in os.environ.items() if not k.startswith(("REPLICA_AUDIT_SPARK", "PYSPARK_GATEWAY"))}
    code = "from audit.diff import spark; print(spark.get_spark().range(3).count())"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env={**env, "PYTHONPATH": str(REPO)}
    )
    assert done.stdout.strip() == "3", done.stderr
    assert "log level" not in done.stderr and "setLogLevel" not in done.stderr, done.stderr
