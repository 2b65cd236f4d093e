"""Where runs are written: a local directory, or a URI on a filesystem pyarrow (or fsspec) reaches.

    out = location("s3a://audit-bucket/replica-audit")
    run = out / "20261121T100000Z-ab12"          # joined with "/": pathlib would turn s3a:// into s3a:/
    run.spark_path                                 # "s3a://audit-bucket/replica-audit/2026..." for Spark
    fs, path = run.arrow()                         # pyarrow filesystem and path, for pyarrow.parquet & co
    run.write_text("summary.json", text); run.read_text("summary.json"); run.exists("report.html")

| scheme | written through | Spark reaches it as |
|---|---|---|
| a path, `file://` | pyarrow LocalFileSystem | the absolute path |
| `s3://`, `s3a://`, `s3n://` | pyarrow S3FileSystem (AWS_* variables) | the URI (`s3a://` on open Hadoop) |
| `gs://`, `gcs://` | pyarrow GcsFileSystem | the URI (with the GCS connector) |
| `hdfs://`, `viewfs://` | pyarrow HadoopFileSystem (libhdfs: HADOOP_HOME) | the URI |
| another fsspec protocol (`memory://`, ...) | fsspec, wrapped for pyarrow | `abfs(s)://`, `wasb(s)://` only |

Anything else is refused with a ConfigError naming the value. :func:`local_out_dir` is for code that
still writes with local file APIs: it accepts a local path and refuses a URI, saying why.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from audit.errors import ConfigError

LOCAL_SCHEMES = frozenset({"", "file"})
S3_SCHEMES = frozenset({"s3", "s3a", "s3n"})
GCS_SCHEMES = frozenset({"gs", "gcs"})
HDFS_SCHEMES = frozenset({"hdfs", "viewfs"})
SPARK_SCHEMES = LOCAL_SCHEMES | S3_SCHEMES | GCS_SCHEMES | HDFS_SCHEMES | {"abfs", "abfss", "wasb", "wasbs"}
"""Schemes Spark (Hadoop) can read and write, given the connector on its classpath."""


def _scheme(value: str) -> str:
    if "://" not in value:
        return ""
    return value.split("://", 1)[0].lower()


@dataclass(frozen=True, slots=True)
class Location:
    """A directory given as a local path or a URI; joins keep the scheme intact."""

    uri: str
    """`/abs/path` for a local directory, else `scheme://authority/path` without a trailing `/`."""
    scheme: str

    def __truediv__(self, part: str) -> Location:
        part = str(part).strip("/")
        if not part:
            return self
        return Location(f"{self.uri}/{part}" if self.uri != "/" else f"/{part}", self.scheme)

    def __str__(self) -> str:
        return self.uri

    @property
    def is_local(self) -> bool:
        return self.scheme in LOCAL_SCHEMES

    @property
    def spark_path(self) -> str:
        """The path Spark reads and writes; ConfigError for a filesystem Hadoop has no connector for."""
        if self.scheme not in SPARK_SCHEMES:
            raise ConfigError(
                f"{self.uri}: Spark cannot read or write {self.scheme}:// (it reaches: a local or shared path, "
                f"{', '.join(sorted(s + '://' for s in SPARK_SCHEMES - LOCAL_SCHEMES))})"
            )
        return self.uri

    def arrow(self) -> tuple[Any, str]:
        """(pyarrow FileSystem, path in it) for pyarrow.parquet, pyarrow.dataset and the helpers below."""
        return _arrow_filesystem(self), _arrow_path(self)

    # --- small files (summary.json, state.json, report.html) -------------------------------------------
    def write_text(self, name: str, text: str) -> None:
        """Write `name` under this directory (creating directories); atomic for local files (rename)."""
        fs, path = (self / name).arrow()
        parent = path.rsplit("/", 1)[0]
        if parent:
            fs.create_dir(parent, recursive=True)
        if self.is_local:
            tmp = f"{path}.tmp{os.getpid()}"
            with fs.open_output_stream(tmp) as out:
                out.write(text.encode("utf-8"))
            fs.move(tmp, path)
            return
        with fs.open_output_stream(path) as out:  # object stores publish a whole object at close
            out.write(text.encode("utf-8"))

    def read_text(self, name: str) -> str:
        fs, path = (self / name).arrow()
        try:
            with fs.open_input_stream(path) as f:
                data: bytes = f.read()
        except FileNotFoundError:
            raise ConfigError(f"{(self / name).uri}: no such file") from None
        return data.decode("utf-8")

    def exists(self, name: str = "") -> bool:
        import pyarrow.fs as pafs

        fs, path = (self / name).arrow() if name else self.arrow()
        return bool(fs.get_file_info(path).type != pafs.FileType.NotFound)

    def makedirs(self) -> None:
        fs, path = self.arrow()
        fs.create_dir(path, recursive=True)

    def listdir(self) -> list[str]:
        import pyarrow.fs as pafs

        fs, path = self.arrow()
        infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
        return sorted(i.base_name for i in infos)


def location(value: str | Path) -> Location:
    """A directory as given by an operator (`--out`, a DAG Param); ConfigError for what cannot be reached."""
    text = str(value).strip()
    if not text:
        raise ConfigError("output directory: empty")
    scheme = _scheme(text)
    if scheme in LOCAL_SCHEMES:
        path = urlsplit(text).path if scheme == "file" else text
        return Location(str(Path(path).expanduser().absolute()), "")
    if scheme in S3_SCHEMES | GCS_SCHEMES | HDFS_SCHEMES or _fsspec_knows(scheme):
        rest = text.split("://", 1)[1].rstrip("/")
        if not rest.split("/", 1)[0] and scheme not in HDFS_SCHEMES | {"memory"}:
            raise ConfigError(f"{text}: no bucket or host after {scheme}://")
        return Location(f"{scheme}://{rest}", scheme)
    raise ConfigError(
        f"{text}: output directories on {scheme}:// are not supported (use a local or shared path, s3a://, "
        "gs://, hdfs://, or a filesystem fsspec has installed)"
    )


def local_out_dir(value: str | Path) -> Path:
    """The output directory for code that writes with local file APIs: a path; a URI is refused, saying why."""
    where = location(value)
    if not where.is_local:
        raise ConfigError(
            f"{where.uri}: this version writes runs with local file APIs, so the output directory must be a "
            "local path or a mount every worker shares (NFS, a Kubernetes volume); Spark's snapshot and diff "
            "paths may still be on object storage (docs/spark.md)"
        )
    return Path(where.uri)


def _fsspec_knows(scheme: str) -> bool:
    if not scheme:
        return False
    try:
        import fsspec
    except ImportError:
        return False
    return scheme in fsspec.available_protocols()


def _arrow_path(where: Location) -> str:
    if where.is_local:
        return where.uri
    rest = where.uri.split("://", 1)[1]
    if where.scheme in HDFS_SCHEMES:
        return "/" + rest.split("/", 1)[1] if "/" in rest else "/"
    if where.scheme in S3_SCHEMES | GCS_SCHEMES:
        return rest  # bucket/key
    import fsspec

    return str(fsspec.get_filesystem_class(where.scheme)._strip_protocol(where.uri))


def _arrow_filesystem(where: Location) -> Any:
    import pyarrow.fs as pafs

    try:
        if where.is_local:
            return pafs.LocalFileSystem()
        if where.scheme in S3_SCHEMES:
            return pafs.S3FileSystem(
                region=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or None,
                endpoint_override=os.environ.get("AWS_ENDPOINT_URL") or None,
            )
        if where.scheme in GCS_SCHEMES:
            return pafs.GcsFileSystem()
        if where.scheme in HDFS_SCHEMES:
            authority = where.uri.split("://", 1)[1].split("/", 1)[0]
            host, _, port = authority.partition(":")
            return pafs.HadoopFileSystem(host or "default", int(port or 0))
        import fsspec
        from pyarrow.fs import FSSpecHandler, PyFileSystem

        return PyFileSystem(FSSpecHandler(fsspec.filesystem(where.scheme)))
    except (OSError, ImportError, ValueError) as e:
        raise ConfigError(f"{where.uri}: cannot open its filesystem: {e}") from None
