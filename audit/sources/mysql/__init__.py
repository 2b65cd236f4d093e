"""Kind mysql: MySQL and MariaDB tables row by row, and their GTID sets (docs/mysql.md).

The two entry points the pipeline wires:

- :func:`audit_tables` (engine.py): the row audit -> :class:`RowsAudit` (findings of check `rows`:
  rows, tables on one side, schema mismatches; coverage metrics, per-table digests, the repair plan);
- :func:`replication_findings` (replication.py): link, lag, missing/errant GTIDs, wrong master ->
  :class:`ReplicationAudit`.
"""

from __future__ import annotations

from audit.sources.mysql.endpoint import MySQLEndpoint, MySQLSettings, parse_tables
from audit.sources.mysql.engine import RowsAudit, audit_tables
from audit.sources.mysql.replication import ReplicationAudit, replication_findings

KIND = "mysql"
SUITE = "mysql.json"
ENDPOINT_HELP = "mysql://user:password@host:3306 (or conn:<airflow_conn_id>)"

__all__ = [
    "ENDPOINT_HELP",
    "KIND",
    "SUITE",
    "MySQLEndpoint",
    "MySQLSettings",
    "ReplicationAudit",
    "RowsAudit",
    "audit_tables",
    "parse_tables",
    "replication_findings",
]
