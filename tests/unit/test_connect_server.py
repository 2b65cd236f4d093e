"""audit/diff/connect_server.py's command line and environment, and the Connect URL handling of audit/diff/spark.py."""

from __future__ import annotations

import os
import sys

import pytest

from audit.diff import connect_server
from audit.diff import spark as session
from audit.errors import ConfigError


def _conf(cmd: list[str]) -> dict[str, str]:
    pairs = [cmd[i + 1] for i, arg in enumerate(cmd) if arg == "--conf"]
    return dict(p.split("=", 1) for p in pairs)


@pytest.mark.parametrize(
    ("master", "parallelism"),
    [
        ("local[3]", "3"),
        ("local[*]", str(os.cpu_count())),
        ("local[2,4]", "2"),
        ("local", "1"),
        ("local-cluster[2,1,1024]", None),  # once `-cluster[2`, which Spark could not parse: no server
        ("spark://h:7077", None),
    ],
)
def test_a_local_server_tells_its_clients_its_parallelism(master: str, parallelism: str | None) -> None:
    conf = _conf(connect_server.server_command("127.0.0.1", 15002, master, {}))
    assert conf.get("spark.default.parallelism") == parallelism
    assert conf["spark.connect.grpc.binding.address"] == "127.0.0.1"
    assert ("spark.driver.memory" in conf) is master.startswith("local")  # the local sizing, not a cluster's


def test_only_a_local_server_is_pinned_to_loopback_and_this_interpreter() -> None:
    local = connect_server.server_env("local[*]", {}, base={})
    assert local["PYSPARK_PYTHON"] == sys.executable and local["SPARK_LOCAL_IP"] == "127.0.0.1"
    cluster = connect_server.server_env("spark://h:7077", {}, base={"PYSPARK_PYTHON": "/opt/py/bin/python"})
    assert "SPARK_LOCAL_IP" not in cluster and cluster["PYSPARK_PYTHON"] == "/opt/py/bin/python"
    given = connect_server.server_env("yarn", {"spark.pyspark.python": "/srv/py"}, base={})
    assert given["PYSPARK_PYTHON"] == "/srv/py"


def test_urls_of_ipv6_servers_have_brackets() -> None:
    assert connect_server.connect_url("::1", 15002) == "sc://[::1]:15002"
    assert connect_server.connect_url("127.0.0.1", 15002) == "sc://127.0.0.1:15002"
    assert session._connect_address("sc://[::1]:15010") == ("::1", 15010)
    assert session._connect_address("sc://host/;token=x") == ("host", 15002)


@pytest.mark.parametrize("url", ["sc://host:abc", "sc://host:99999", "sc://::1:15002/;token=s3cret"])
def test_a_malformed_connect_url_is_a_usage_error_without_its_parameters(url: str) -> None:
    with pytest.raises(ConfigError, match="not a Spark Connect URL") as raised:
        session._connect_address(url)
    assert "s3cret" not in str(raised.value)
