"""Kind `rocketmq`: a master's and a slave's commit-log stores compared, and the HA offsets checked.

- `format`: the record layout (docs/formats/rocketmq-commitlog.md); `columns` and `scan`: the columnar
  scanner; `store`: a store's files and offsets; `contiguity`: the holes between its files.
- `spark_store`, `record_diff`, `diff`: the Spark diff of two stores.
- `ha`: HA state from broker logs and mqadmin output (a negative "slave fall behind master" lag).
"""

from __future__ import annotations
