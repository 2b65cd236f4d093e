#!/bin/bash
# mariadb-master, first start only (/docker-entrypoint-initdb.d): the replication account, the auditor
# account and a sample schema. Written to the binlog on purpose: the replica gets all of it by GTID
# replication, so both sides start identical. Passwords come from docker/.env (letters and digits).
mariadb --protocol=socket -uroot -p"${MARIADB_ROOT_PASSWORD}" <<SQL
CREATE USER IF NOT EXISTS 'repl'@'%' IDENTIFIED BY '${REPL_PASSWORD}';
GRANT REPLICATION SLAVE ON *.* TO 'repl'@'%';
CREATE USER IF NOT EXISTS 'auditor'@'%' IDENTIFIED BY '${AUDITOR_PASSWORD}';
-- read-only auditing: rows, binlog/GTID positions, replica status, connected clients
GRANT SELECT, PROCESS, BINLOG MONITOR, REPLICA MONITOR ON *.* TO 'auditor'@'%';
CREATE DATABASE IF NOT EXISTS shop;
USE shop;
CREATE TABLE IF NOT EXISTS orders (
  id BIGINT PRIMARY KEY,
  customer VARCHAR(64) NOT NULL,
  total DECIMAL(12, 2) NOT NULL,
  note TEXT NULL,
  updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6)
);
INSERT IGNORE INTO orders (id, customer, total, note)
  SELECT seq, CONCAT('customer-', seq % 97), ROUND(seq * 1.37, 2), IF(seq % 10 = 0, NULL, CONCAT('n', seq))
  FROM seq_1_to_1000;
SQL
