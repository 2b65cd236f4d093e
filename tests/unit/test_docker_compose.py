"""docker/: the compose stack is complete and consistent with the image, the repo and the inventory.

No daemon is needed: the file is checked structurally, and by `docker compose config` (or the older
`docker-compose config`) when a compose CLI is installed.
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from audit.inventory import parse_inventory

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
IMAGE_SERVICES = ("airflow", "spark-master", "spark-worker")
OUT = "/opt/replica-audit/out"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    return loaded


@pytest.fixture(scope="module")
def dockerfile() -> str:
    return (DOCKER / "Dockerfile").read_text()


def command(service: dict[str, Any]) -> str:
    cmd = service.get("command", [])
    return " ".join(cmd) if isinstance(cmd, list) else str(cmd)


def test_the_stack_has_every_service(compose: dict[str, Any]) -> None:
    assert {*IMAGE_SERVICES, "redis-master", "redis-replica", "mariadb-master", "mariadb-replica"} <= set(
        compose["services"]
    )


def test_project_services_build_the_image_from_the_repo_root(compose: dict[str, Any]) -> None:
    for name in IMAGE_SERVICES:
        build = compose["services"][name]["build"]
        assert (DOCKER / build["context"]).resolve() == REPO, name
        assert (DOCKER / build["context"] / build["dockerfile"]).resolve() == DOCKER / "Dockerfile", name


def test_dockerfile_installs_from_pyproject_and_constraints(dockerfile: str) -> None:
    base = re.search(r"^FROM python:(\d+)\.(\d+)-slim", dockerfile, re.M)
    assert base is not None
    requires = re.search(r'requires-python = ">=3\.(\d+),<3\.(\d+)"', (REPO / "pyproject.toml").read_text())
    assert requires is not None and int(requires[1]) <= int(base[2]) < int(requires[2])
    assert "openjdk-17-jre-headless" in dockerfile
    assert re.search(r"^COPY pyproject\.toml constraints\.txt README\.md \./$", dockerfile, re.M)
    assert 'pip install -c constraints.txt ".[airflow]" ./providers/replica-audit' in dockerfile
    for folder in ("dags", "providers"):  # the GX suites ship inside the library (audit/expectations)
        assert re.search(rf"^COPY {folder} \./{folder}$", dockerfile, re.M), folder
    assert "AIRFLOW__CORE__DAGS_FOLDER=/opt/replica-audit/src/dags" in dockerfile
    assert f"REPLICA_AUDIT_OUT={OUT}" in dockerfile


def test_image_installs_the_provider_distribution_not_a_plugins_folder(dockerfile: str) -> None:
    assert "pip install --no-deps --force-reinstall . ./providers/replica-audit" in dockerfile
    assert "airflow providers get airflow-provider-replica-audit" in dockerfile  # the build checks Airflow sees it
    code = "\n".join(line for line in dockerfile.splitlines() if not line.lstrip().startswith("#"))
    assert "PLUGINS_FOLDER" not in code and "PYTHONPATH" not in code and "plugins" not in code
    provider = (REPO / "providers" / "replica-audit" / "pyproject.toml").read_text()
    assert 'name = "airflow-provider-replica-audit"' in provider
    assert "[project.entry-points.apache_airflow_provider]" in provider


def test_build_context_sends_what_the_dockerfile_copies(dockerfile: str) -> None:
    allowed = {
        line[1:].rstrip("/")
        for line in (DOCKER / "Dockerfile.dockerignore").read_text().splitlines()
        if line.startswith("!")
    }
    copied = {src for line in re.findall(r"^COPY (.+) \S+$", dockerfile, re.M) for src in line.split()}
    assert copied
    for path in copied:
        assert path.split("/", 1)[0] in allowed, path
        assert (REPO / path).exists(), path


def test_spark_cluster_wiring(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert services["airflow"]["environment"]["REPLICA_AUDIT_SPARK_MASTER"] == "spark://spark-master:7077"
    assert "deploy.master.Master" in command(services["spark-master"]) and "--port 7077" in command(
        services["spark-master"]
    )
    assert "deploy.worker.Worker spark://spark-master:7077" in command(services["spark-worker"])
    assert "spark.driver.host=airflow" in services["airflow"]["environment"]["REPLICA_AUDIT_SPARK_CONF"]


def test_output_volume_is_shared_at_the_same_path(compose: dict[str, Any]) -> None:
    for name in ("airflow", "spark-worker"):
        assert f"audit-out:{OUT}" in compose["services"][name]["volumes"], name
    assert "audit-out" in compose["volumes"]


def test_sample_pairs_replicate(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert "--replicaof redis-master 6379" in command(services["redis-replica"])
    replica_init = DOCKER / "mariadb" / "replica-init.sh"
    assert any(
        v.startswith("./mariadb/replica-init.sh:/docker-entrypoint-initdb.d/")
        for v in services["mariadb-replica"]["volumes"]
    )
    assert "MASTER_USE_GTID = slave_pos" in replica_init.read_text()
    assert any(
        v.startswith("./mariadb/master-init.sh:/docker-entrypoint-initdb.d/")
        for v in services["mariadb-master"]["volumes"]
    )
    for name in ("mariadb-master", "mariadb-replica"):
        assert "--log-bin=mariadb-bin" in command(services[name])
    server_ids = {
        re.search(r"--server-id=(\d+)", command(services[n]))[1]  # type: ignore[index]
        for n in ("mariadb-master", "mariadb-replica")
    }
    assert len(server_ids) == 2


def test_bind_mounts_exist(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith("."):
                assert (DOCKER / source).exists(), f"{name}: {source}"


def test_inventory_is_valid_and_points_at_compose_services(
    compose: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    inventory = parse_inventory((DOCKER / "inventory.yaml").read_text(), source="docker/inventory.yaml")
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]  # nothing deprecated
    assert inventory.pairs
    assert {p.kind for p in inventory.pairs} == {"redis", "mysql"}
    env = {k: v for s in compose["services"].values() for k, v in (s.get("environment") or {}).items()}
    for pair in inventory.pairs:
        for side in (pair.master, pair.replica):
            url = side.get_secret_value() if side is not None and not isinstance(side, dict) else ""
            if url.startswith("conn:"):  # an Airflow connection the compose stack defines
                url = str(env[f"AIRFLOW_CONN_{url.removeprefix('conn:').upper()}"])
            host = re.match(r"^\w+://(?:[^@/]*@)?([^:/]+)", url)
            assert host is not None and host[1] in compose["services"], url


def _compose_cli() -> list[str] | None:
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


def test_compose_config_validates() -> None:
    cli = _compose_cli()
    if cli is None:
        pytest.skip("no compose CLI (docker compose / docker-compose) installed")
    result = subprocess.run(
        [*cli, "-f", str(DOCKER / "compose.yaml"), "config", "-q"], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert result.returncode == 0, result.stderr
