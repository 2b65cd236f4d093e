"""Run directories as URIs: joins keep the scheme, files go through pyarrow/fsspec, the unsupported is refused."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from audit.errors import ConfigError
from audit.storage import local_out_dir, location


def test_joins_keep_the_scheme() -> None:
    run = location("s3a://audit-bucket/replica-audit/") / "20261121T100000Z-ab12" / "snapshots/cache/master"
    assert run.uri == "s3a://audit-bucket/replica-audit/20261121T100000Z-ab12/snapshots/cache/master"
    assert run.spark_path == run.uri  # not pathlib's "s3a:/audit-bucket/..."
    assert location("hdfs://nn:8020/audit").uri == "hdfs://nn:8020/audit"
    assert location("file:///tmp/x/").uri == "/tmp/x" and location("/tmp/x") / "r" == location("/tmp/x/r")


@pytest.mark.parametrize("where", ["local", "memory"])
def test_files_and_parquet_round_trip(where: str, tmp_path: Path) -> None:
    base = location(tmp_path / "out" if where == "local" else f"memory://audit-{tmp_path.name}/out")
    run = base / "run-1"
    run.write_text("summary.json", '{"verdict": "passed"}')
    assert run.read_text("summary.json") == '{"verdict": "passed"}'
    assert run.exists("summary.json") and not run.exists("report.html")
    fs, path = (run / "findings.parquet").arrow()
    fs.create_dir(path, recursive=True)
    pq.write_table(pa.table({"key": [b"a", b"b"]}), f"{path}/cache.parquet", filesystem=fs)
    assert pq.read_table(path, filesystem=fs).column("key").to_pylist() == [b"a", b"b"]
    assert run.listdir() == ["findings.parquet", "summary.json"]
    if where == "local":
        assert (tmp_path / "out" / "run-1" / "summary.json").read_text() == '{"verdict": "passed"}'
        assert run.spark_path == str(tmp_path / "out" / "run-1")


def test_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"run-1/summary\.json: no such file"):
        location(tmp_path / "run-1").read_text("summary.json")


def test_object_stores_map_to_pyarrow_filesystems() -> None:
    import pyarrow.fs as pafs

    fs, path = (location("s3a://audit-bucket/out") / "run").arrow()
    assert isinstance(fs, pafs.S3FileSystem) and path == "audit-bucket/out/run"


def test_unsupported_is_refused_clearly() -> None:
    with pytest.raises(ConfigError, match=r"ftpx://h/x: output directories on ftpx:// are not supported"):
        location("ftpx://h/x")
    with pytest.raises(ConfigError, match="no bucket"):
        location("s3a:///x")
    with pytest.raises(ConfigError, match=r"Spark cannot read or write memory://"):
        _ = location("memory://b/x").spark_path


def test_local_out_dir_accepts_paths_and_explains_uris(tmp_path: Path) -> None:
    assert local_out_dir(f"file://{tmp_path}") == tmp_path
    assert local_out_dir(str(tmp_path)) == tmp_path
    with pytest.raises(ConfigError, match=r"s3a://b/out: this version writes runs with local file APIs"):
        local_out_dir("s3a://b/out")
