#!/bin/bash
# mariadb-replica, first start only (/docker-entrypoint-initdb.d): follow mariadb-master by GTID from
# the start of its binlog (empty gtid_slave_pos), which replays the master's accounts, schema and rows.
# The master need not be up yet: the IO thread retries every MASTER_CONNECT_RETRY seconds.
mariadb --protocol=socket -uroot -p"${MARIADB_ROOT_PASSWORD}" <<SQL
CHANGE MASTER TO
  MASTER_HOST = '${MASTER_HOST:-mariadb-master}',
  MASTER_PORT = ${MASTER_PORT:-3306},
  MASTER_USER = 'repl',
  MASTER_PASSWORD = '${REPL_PASSWORD}',
  MASTER_CONNECT_RETRY = 5,
  MASTER_USE_GTID = slave_pos;
START SLAVE;
SQL
