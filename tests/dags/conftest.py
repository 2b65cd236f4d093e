"""Airflow as a user gets it: the provider and the library installed from wheels, an empty plugins folder.

`installed_python` builds the wheels of `replica-audit` and `airflow-provider-replica-audit` from this
checkout and installs them into a fresh venv that borrows every other package (Airflow, Spark, GX, ...)
from the project's venv by a plain `.pth` path line. That line does not run the project venv's own
`.pth` files, so its editable installs stay out of sight: what imports as `audit` and
`replica_audit_provider` is what the wheels installed (the tests check this).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO

PROVIDER_SRC = REPO / "providers" / "replica-audit"
_IGNORE = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "*.pyc")


def _run(args: list[str], cwd: Path, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run outside the checkout: `python -c`/`-m` put the working directory first on sys.path."""
    done = subprocess.run(args, capture_output=True, text=True, stdin=subprocess.DEVNULL, cwd=cwd, **kwargs)
    assert done.returncode == 0, f"{args}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done


def script_said(script: str, *args: str, cwd: Path, env: dict[str, str], timeout: float) -> dict[str, Any]:
    """Run `script` with this interpreter (`python -c`, outside the checkout) and return what it printed
    last, a JSON object: how the DAG tests read what a script saw inside Airflow's own imports."""
    done = _run([sys.executable, "-c", script, *args], cwd, env=env, timeout=timeout)
    said: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return said


def build_wheels(work: Path) -> list[Path]:
    """Wheels of the library and the provider, built from copies (the checkout gets no build/ litter)."""
    core = work / "src" / "core"
    core.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, core / name)
    shutil.copytree(REPO / "audit", core / "audit", ignore=_IGNORE)
    provider = work / "src" / "provider"
    shutil.copytree(PROVIDER_SRC, provider, ignore=_IGNORE)
    out = work / "wheels"
    args = ["-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), str(core), str(provider)]
    _run([sys.executable, *args], cwd=work)
    wheels = sorted(out.glob("*.whl"))
    assert [w.name.split("-")[0] for w in wheels] == ["airflow_provider_replica_audit", "replica_audit"], wheels
    return wheels


def installed_python(work: Path) -> Path:
    """A fresh venv with both wheels installed; returns its python."""
    venv = work / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=work)
    python = venv / "bin" / "python"
    site = Path(
        _run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], cwd=work).stdout.strip()
    )
    (site / "project_venv.pth").write_text(sysconfig.get_path("purelib") + "\n")
    _run([str(python), "-m", "pip", "install", "-q", "--no-deps", *map(str, build_wheels(work))], cwd=work)
    probe = "import json, audit, replica_audit_provider as p; print(json.dumps([audit.__file__, p.__file__]))"
    where = json.loads(_run([str(python), "-c", probe], cwd=work).stdout)
    assert all(Path(w).is_relative_to(site) for w in where), where  # the wheels, not the editable checkout
    return python


@pytest.fixture(scope="session")
def airflow_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return installed_python(tmp_path_factory.mktemp("provider-install"))


@pytest.fixture(scope="session")
def airflow_env(tmp_path_factory: pytest.TempPathFactory, airflow_python: Path) -> dict[str, str]:
    """AIRFLOW_HOME with a migrated DB; the DAGs folder holds the repo's DAG files and a downstream DAG."""
    home = tmp_path_factory.mktemp("airflow-home")
    dags, plugins = home / "dags", home / "plugins"
    plugins.mkdir()
    shutil.copytree(REPO / "dags", dags, ignore=_IGNORE)
    shutil.copy(Path(__file__).with_name("downstream_dag.py"), dags / "downstream_dag.py")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__DAGS_FOLDER=str(dags),
        AIRFLOW__CORE__PLUGINS_FOLDER=str(plugins),  # empty: everything comes from the installed provider
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        GX_ANALYTICS_ENABLED="false",
        PATH=f"{airflow_python.parent}:{os.environ.get('PATH', '')}",
    )
    for args in (["db", "migrate"], ["dags", "reserialize"], ["dags", "unpause", "downstream_of_dag_pair"]):
        airflow(env, airflow_python, *args)
    return {**env, "AIRFLOW_PYTHON": str(airflow_python)}


def airflow(env: dict[str, str], python: Path | str, *args: str) -> subprocess.CompletedProcess[str]:
    return _run([str(python), "-m", "airflow", *args], cwd=Path(env["AIRFLOW_HOME"]), env=env)
