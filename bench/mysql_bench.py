"""Kind mysql against its peers on one local MariaDB GTID pair: a 1M-row table, 10 planted differences.

    .venv/bin/python bench/mysql_bench.py [--rows 1000000] [--spark] [--data-diff-python /venv/bin/python]

Starts a master and a replica on loopback (audit/local/mariadb_server.py), loads the table on the master
with the sequence engine, plants 10 differences on the replica with sql_log_bin = 0 (4 changed rows,
3 deleted, 3 extra), then times in one run, side by side with how many of the 10 each found:

- a baseline: the server-side floor of one side: COUNT(*) and one pt-style CRC32 of the whole table;
- replica-audit to rows (no recheck rounds) and with its default 3 recheck rounds, in this process;
  with --spark also through Spark local tasks (session started before the clock);
- pt-table-checksum with 10k-row chunks then pt-table-sync --print (Debian's percona-toolkit), when
  installed: it writes its checksums into the master (percona.checksums), replica-audit writes nothing;
- data-diff 0.11.2 through its Python API, when an interpreter that has it is given (it is never a
  dependency of this project: install it in a throwaway venv).

A peer that is not installed is reported as skipped. Peak RSS of this process is printed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from audit.local.mariadb_server import MariaDBServer, start_pair, wait_in_sync
from audit.sources.mysql.endpoint import MySQLSettings
from audit.sources.mysql.engine import audit_tables

TABLE = "bench.orders"
DDL = (
    "CREATE TABLE bench.orders (id INT PRIMARY KEY, customer VARCHAR(32) NOT NULL, qty INT NOT NULL, "
    "price DECIMAL(10,2) NOT NULL, status ENUM('new','paid','shipped') NOT NULL, created DATETIME(6) NOT NULL, "
    "note VARCHAR(255) NULL)"
)
LOAD = (
    "INSERT INTO bench.orders SELECT seq, CONCAT('cust-', seq MOD 9973), seq MOD 100, (seq MOD 100000) / 100, "
    "ELT(1 + seq MOD 3, 'new', 'paid', 'shipped'), "
    "TIMESTAMP'2024-01-01 00:00:00' + INTERVAL seq SECOND + INTERVAL seq MOD 1000000 MICROSECOND, "
    "IF(seq MOD 10 = 0, NULL, CONCAT('note ', seq)) FROM bench.seq_1_to_{rows}"
)


def planted(rows: int) -> tuple[list[int], list[str]]:
    """10 keys spread over the table and the replica-only statements that make them differ."""
    k = [max(1, rows * i // 11) for i in range(1, 8)]
    extra = [rows + 17, rows + 1000, rows * 2]
    sql = [
        f"UPDATE bench.orders SET qty = qty + 1 WHERE id = {k[0]}",
        f"UPDATE bench.orders SET note = NULL WHERE id = {k[1] + (1 if k[1] % 10 == 0 else 0)}",
        f"UPDATE bench.orders SET price = price + 0.01 WHERE id = {k[2]}",
        f"UPDATE bench.orders SET created = created + INTERVAL 1 MICROSECOND WHERE id = {k[3]}",
        *(f"DELETE FROM bench.orders WHERE id = {i}" for i in k[4:7]),
        *(f"INSERT INTO bench.orders VALUES ({i}, 'ghost', 1, 1.00, 'new', '2024-01-01', NULL)" for i in extra),
    ]
    keys = [k[0], k[1] + (1 if k[1] % 10 == 0 else 0), *k[2:7], *extra]
    return keys, sql


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


# --- the tools ---------------------------------------------------------------------------------------------


def baseline(master: MariaDBServer) -> list[tuple[str, float, str]]:
    crc = (
        "SELECT COUNT(*), BIT_XOR(CRC32(CONCAT_WS('#', id, customer, qty, price, status, created, note, "
        "ISNULL(note)))) FROM bench.orders"
    )
    count_s, _ = timed(lambda: master.execute("SELECT COUNT(*) FROM bench.orders"))
    crc_s, _ = timed(lambda: master.execute(crc))
    return [
        ("baseline: COUNT(*) of one side", count_s, "-"),
        ("baseline: one pt-style CRC32 of one side", crc_s, "-"),
    ]


def replica_audit(spark: Any, urls: tuple[str, str], keys: list[int], rounds: int) -> tuple[float, str, str]:
    settings = MySQLSettings(recheck_rounds=rounds)
    seconds, result = timed(lambda: audit_tables(spark, urls[0], urls[1], [TABLE], settings, check_replication=True))
    found = {int(json.loads(f.key)[0]) for f in result.findings if f.key}
    m = result.metrics
    note = f"{int(m['chunks'])} chunks, {int(m['master_rows_shipped'] + m['replica_rows_shipped'])} rows shipped"
    return seconds, f"{len(found & set(keys))}/{len(keys)}", note


def pt_tools(master: MariaDBServer, replica: MariaDBServer, keys: list[int]) -> tuple[float, str, str] | str:
    if not (shutil.which("pt-table-checksum") and shutil.which("pt-table-sync")):
        return "skipped: percona-toolkit not installed (apt-get install percona-toolkit)"
    dsn_m = f"h=127.0.0.1,P={master.port},u={master.user},p={master.password}"
    dsn_r = f"h=127.0.0.1,P={replica.port},u={replica.user},p={replica.password}"
    master.execute(
        "CREATE DATABASE IF NOT EXISTS percona",
        "CREATE TABLE IF NOT EXISTS percona.dsns (id INT AUTO_INCREMENT PRIMARY KEY, parent_id INT, dsn VARCHAR(255))",
        "DELETE FROM percona.dsns",
        f"INSERT INTO percona.dsns (dsn) VALUES ('{dsn_r}')",
    )
    wait_in_sync(master, replica)
    checksum = [
        "pt-table-checksum", dsn_m, "--databases=bench", "--tables=orders", "--chunk-size=10000",
        "--no-check-binlog-format", "--no-check-replication-filters", "--replicate=percona.checksums",
        f"--recursion-method=dsn={dsn_m},D=percona,t=dsns", "--max-lag=60",
    ]  # fmt: skip
    sync = [
        "pt-table-sync", "--print", "--replicate=percona.checksums", "--sync-to-master", dsn_r,
        "--databases=bench", "--tables=orders",
    ]  # fmt: skip
    t0 = time.perf_counter()
    first = subprocess.run(checksum, capture_output=True, text=True)
    t1 = time.perf_counter()
    second = subprocess.run(sync, capture_output=True, text=True)
    t2 = time.perf_counter()
    if first.returncode not in (0, 16) or second.returncode not in (0, 2):
        return (
            f"failed: pt-table-checksum {first.returncode} {first.stderr[-300:]} / pt-table-sync {second.stderr[-300:]}"
        )
    fixed = {int(m) for m in re.findall(r"`id`\s*=\s*'?(\d+)'?", second.stdout)}
    fixed |= {int(m) for m in re.findall(r"VALUES \('(\d+)'", second.stdout)}
    statements = len([line for line in second.stdout.splitlines() if re.match(r"^(REPLACE|DELETE|INSERT)", line)])
    note = f"checksum {t1 - t0:.2f} s + sync {t2 - t1:.2f} s, {statements} statements; writes into the master"
    return t2 - t0, f"{len(fixed & set(keys))}/{len(keys)}", note


DATA_DIFF_SCRIPT = """
import json, sys, time
from data_diff import connect_to_table, diff_tables
m, r, cols = sys.argv[1], sys.argv[2], tuple(sys.argv[3].split(","))
t0 = time.perf_counter()
a = connect_to_table(m, "orders", "id", extra_columns=cols)
b = connect_to_table(r, "orders", "id", extra_columns=cols)
keys = {int(row[0]) for sign, row in diff_tables(a, b, threaded=True)}
print(json.dumps({"seconds": time.perf_counter() - t0, "keys": sorted(keys)}))
"""


def data_diff(python: str | None, master: MariaDBServer, replica: MariaDBServer, keys: list[int]) -> Any:
    if not python:
        return "skipped: no interpreter with data-diff given (--data-diff-python; install it in a throwaway venv)"
    cols = "customer,qty,price,status,created,note"
    urls = [f"mysql://{s.user}:{s.password}@127.0.0.1:{s.port}/bench" for s in (master, replica)]
    done = subprocess.run([python, "-c", DATA_DIFF_SCRIPT, *urls, cols], capture_output=True, text=True)
    if done.returncode != 0:
        return f"failed ({done.returncode}): {done.stderr.strip().splitlines()[-1] if done.stderr else ''}"
    out = json.loads(done.stdout.strip().splitlines()[-1])
    return out["seconds"], f"{len(set(out['keys']) & set(keys))}/{len(keys)}", "Python API, default bisection"


# --- main ----------------------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--spark", action="store_true", help="also run replica-audit's chunk work as Spark tasks")
    ap.add_argument("--data-diff-python", default=os.environ.get("REPLICA_AUDIT_DATA_DIFF_PYTHON"))
    ap.add_argument("--workdir", type=Path, default=None)
    args = ap.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="mysql-bench-"))
    master, replica = start_pair(work)
    try:
        t_load, _ = timed(lambda: master.execute("CREATE DATABASE bench", DDL, LOAD.format(rows=args.rows)))
        wait_in_sync(master, replica, timeout_s=600)
        keys, plant = planted(args.rows)
        replica.execute("SET SESSION sql_log_bin = 0", *plant)
        print(f"{args.rows} rows loaded in {t_load:.1f} s; 10 differences planted on the replica; "
              f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")  # fmt: skip
        urls = (master.url(), replica.url())
        results: list[tuple[str, Any]] = [(name, (s, found, "")) for name, s, found in baseline(master)]
        results.append(("replica-audit, to rows (no recheck)", replica_audit(None, urls, keys, 0)))
        results.append(("replica-audit, with 3 recheck rounds", replica_audit(None, urls, keys, 3)))
        if args.spark:
            from audit.diff.spark import get_spark

            spark = get_spark()
            replica_audit(spark, urls, keys, 0)  # warms the Python workers
            results.append(("replica-audit in Spark tasks, to rows", replica_audit(spark, urls, keys, 0)))
        results.append(("data-diff 0.11.2", data_diff(args.data_diff_python, master, replica, keys)))
        results.append(("pt-table-checksum + pt-table-sync --print", pt_tools(master, replica, keys)))
    finally:
        replica.stop()
        master.stop()
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    print(f"\n{'tool':<44} {'seconds':>8} {'found':>7}  notes")
    for name, res in results:
        if isinstance(res, str):
            print(f"{name:<44} {'-':>8} {'-':>7}  {res}")
        else:
            print(f"{name:<44} {res[0]:>8.2f} {res[1]:>7}  {res[2]}")
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}; "
          f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")  # fmt: skip


if __name__ == "__main__":
    main()
