"""The pika kind's inventory model: servers and binlog directories, each optional (at least one)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from audit.kernel.pair import PairBase, Strict
from audit.sources.redis.model import DbList, KeyspaceSettings, RespUrl


class BinlogDirs(Strict):
    """Pika binlog locations: each holds `log_db<N>/write2file<M>` and `manifest` (Pika's `log-path`)."""

    master_dir: Path | None = None
    replica_dir: Path | None = None
    file_size: int | None = Field(
        None,
        gt=0,
        description="Pika's binlog-file-size; default: CONFIG GET binlog-file-size when servers are given, "
        "else what the files show",
    )

    @model_validator(mode="after")
    def _both_or_none(self) -> BinlogDirs:
        if (self.master_dir is None) != (self.replica_dir is None):
            raise ValueError("give both master_dir and replica_dir (or neither)")
        return self


class PikaPair(PairBase):
    kind: Literal["pika"]
    master: RespUrl | None = None
    replica: RespUrl | None = None
    dbs: DbList = None
    binlog: BinlogDirs | None = None
    settings: KeyspaceSettings = Field(default_factory=KeyspaceSettings)

    @model_validator(mode="after")
    def _something_to_audit(self) -> PikaPair:
        if (self.master is None) != (self.replica is None):
            raise ValueError("give both servers (master, replica: redis://host:port) or neither (files-only audit)")
        if self.master is None and (self.binlog is None or self.binlog.master_dir is None):
            raise ValueError("kind pika needs servers (master, replica) or binlog: {master_dir, replica_dir}")
        return self

    @property
    def has_servers(self) -> bool:
        return self.master is not None

    @property
    def has_binlogs(self) -> bool:
        return self.binlog is not None and self.binlog.master_dir is not None
