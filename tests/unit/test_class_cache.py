"""The driver JVM's class-data-sharing archive: where it lives, what it is valid for, and a real build."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from audit.diff import class_cache

SESSION = (
    "from audit.diff.spark import get_spark, session_conf\n"
    "print(session_conf()['spark.driver.extraJavaOptions'])\n"
    "print('rows', get_spark().range(5).count())\n"
)


def test_no_archive_no_option_and_an_archive_is_offered_once_built(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("REPLICA_AUDIT_CACHE_DIR", str(tmp_path))
    assert class_cache.java_options() == []
    path = class_cache.archive_path()
    assert path is not None and path.parent == tmp_path
    path.write_bytes(b"x")
    assert class_cache.java_options() == [f"-XX:SharedArchiveFile={path}", class_cache.QUIET]

    from audit.diff.spark import session_conf

    assert f"-XX:SharedArchiveFile={path}" in session_conf()["spark.driver.extraJavaOptions"]
    monkeypatch.setenv("REPLICA_AUDIT_SPARK_CONF", "spark.driver.extraJavaOptions=-Dmine=1")
    assert session_conf()["spark.driver.extraJavaOptions"] == "-Dmine=1"  # the user's options rule, alone


def test_the_archive_lives_in_the_python_installation_else_in_the_users_cache(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    venv, home = tmp_path / "venv", tmp_path / "home"
    monkeypatch.delenv("REPLICA_AUDIT_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    monkeypatch.setattr(sys, "prefix", str(venv))
    own, user = venv / "var" / "cache" / "replica-audit", home / "replica-audit"
    assert class_cache.cache_dirs() == [own, user]
    path = class_cache.archive_path()
    assert path is not None and path.parent == own  # a venv's archive goes with the venv
    user.mkdir(parents=True)
    (user / path.name).write_bytes(b"x")  # one built where the installation was not writable
    assert class_cache.archive_path() == user / path.name
    (user / path.name).unlink()
    monkeypatch.setattr(class_cache, "_writable", lambda folder: folder != own)
    assert class_cache.archive_path() == user / path.name


def test_the_name_follows_the_installation_the_java_binary_and_the_jars(tmp_path) -> None:  # type: ignore[no-untyped-def]
    java, other_java, jars, other_jars = tmp_path / "java", tmp_path / "java17", tmp_path / "jars", tmp_path / "j2"
    for folder in (jars, other_jars):
        folder.mkdir()
        (folder / "spark-core_2.13-4.1.0.jar").write_bytes(b"")
    java.write_bytes(b"j")
    other_java.write_bytes(b"j")
    first = class_cache.archive_name(java, jars)
    installation = first.rsplit("-", 1)[0]
    assert class_cache.archive_name(java, jars) == first
    assert class_cache.archive_name(java, other_jars).rsplit("-", 1)[0] != installation  # another venv
    other = class_cache.archive_name(other_java, jars)
    assert other != first and other.startswith(installation)
    (jars / "spark-core_2.13-4.1.0.jar").rename(jars / "spark-core_2.13-4.1.1.jar")
    upgraded = class_cache.archive_name(java, jars)
    assert upgraded != first and upgraded.startswith(installation)
    # a build of `upgraded` replaces this installation's older archives, never another venv's
    cache = tmp_path / "cache"
    cache.mkdir()
    for name in (first, other, upgraded, class_cache.archive_name(java, other_jars)):
        (cache / name).write_bytes(b"")
    replaced = class_cache.superseded(cache / upgraded)
    assert sorted(p.name for p in replaced) == sorted([first, other])


def _session(env: dict[str, str], log: Path) -> subprocess.CompletedProcess[str]:
    # JAVA_TOOL_OPTIONS reaches the driver JVM beside its own options: it logs where each class came from
    env = {**env, "JAVA_TOOL_OPTIONS": f"-Xlog:class+load=info:file={log}"}
    return subprocess.run([sys.executable, "-c", SESSION], env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
@pytest.mark.integration
def test_a_built_archive_is_mapped_and_a_foreign_classpath_starts_without_it_silently(tmp_path) -> None:  # type: ignore[no-untyped-def]
    env = {**os.environ, "REPLICA_AUDIT_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("REPLICA_AUDIT_SPARK_CONF", None)
    path = class_cache.archive_path()
    assert path is not None
    (tmp_path / "cache").mkdir()
    stale = tmp_path / "cache" / f"{path.name.rsplit('-', 1)[0]}-000000000000.jsa"  # an older JDK's, say
    foreign = tmp_path / "cache" / "spark-driver-00000000-000000000000.jsa"  # another venv's
    for old in (stale, foreign):
        old.write_bytes(b"old")
    build = [sys.executable, "-m", "audit.diff.build_class_cache"]
    built = subprocess.run(build, env=env, capture_output=True, text=True, timeout=900)
    assert built.returncode == 0, built.stdout + built.stderr
    archives = [p for p in (tmp_path / "cache").glob("spark-driver-*.jsa") if p != foreign]
    assert archives == [tmp_path / "cache" / path.name] and archives[0].stat().st_size > 10 * 2**20
    assert foreign.exists() and not stale.exists()
    again = subprocess.run(build, env=env, capture_output=True, text=True, timeout=60)
    assert "(present)" in again.stdout  # idempotent: a second call does not build again

    mapped = _session(env, tmp_path / "mapped.log")
    assert "rows 5" in mapped.stdout and f"SharedArchiveFile={archives[0]}" in mapped.stdout
    assert (tmp_path / "mapped.log").read_text().count("source: shared objects file (top)") > 1000

    env["REPLICA_AUDIT_SPARK_CONF"] = f"spark.driver.extraClassPath={tmp_path}"  # not the archive's classpath
    foreign = _session(env, tmp_path / "foreign.log")
    assert "rows 5" in foreign.stdout and f"SharedArchiveFile={archives[0]}" in foreign.stdout
    assert "shared objects file (top)" not in (tmp_path / "foreign.log").read_text()
    assert "[cds" not in foreign.stdout + foreign.stderr  # nothing printed about it
