"""Kind mysql: MySQL and MariaDB tables row by row, and their GTID sets (docs/mysql.md).

- `kind`: the pair model and the kind's spec; `rows_check` and `gtid_check`: its two checks;
- `engine.audit_tables`: the row audit (catalogs, chunks in Spark tasks, rows, recheck, repair plan);
- `replication.replication_findings`: link, lag, missing/errant GTIDs, wrong master;
- `gtid`, `sql`, `catalog`, `chunks`, `rows`, `repair`, `client`, `endpoint`, `model`, `spark_job`.
"""

from __future__ import annotations
