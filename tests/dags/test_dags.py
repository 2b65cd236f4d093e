"""The DAG files parse cleanly, and the DAGs really run (`airflow dags test`) against real redis-servers.

Three runs that need Spark (about a minute each on 2 cores): consistency_audit on a diverging pair
(then data_quality_report, which needs no Spark, on the history it left), and post_migration_verification
on a faithful migration and on one with planted divergences.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from audit.local.redis_server import RedisServer, free_port, start_pair, wait_in_sync
from audit.local.sample import load_sample, plant_divergences
from tests.conftest import FIXTURES, REPO
from tests.integration.helpers import findings, latest_run, summary, write_inventory

pytestmark = pytest.mark.airflow
DAG_IDS = ("consistency_audit", "data_quality_report", "post_migration_verification")


def in_airflow(env: dict[str, str], code: str) -> Any:
    """Run `code` in the Python the provider was installed into, with the test's Airflow home; it prints JSON."""
    prelude = "import json, sys\n"
    done = subprocess.run(
        [env["AIRFLOW_PYTHON"], "-c", prelude + code], env=env, cwd=env["AIRFLOW_HOME"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def dags_test(env: dict[str, str], dag_id: str, conf: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [env["AIRFLOW_PYTHON"], "-m", "airflow", "dags", "test", dag_id, "-c", json.dumps(conf)],
        env=env,
        cwd=env["AIRFLOW_HOME"],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )


def test_dag_integrity(airflow_env: dict[str, str]) -> None:
    result = in_airflow(
        airflow_env,
        f"""
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder={str(REPO / "dags")!r})
def params(d):
    return {{k: {{"default": d.params.get_param(k).value if d.params.get_param(k).has_value else None,
                 "schema": d.params.get_param(k).schema}} for k in d.params}}
def rejects(d, conf):
    import copy
    p = copy.deepcopy(d.params)
    try:
        for k, v in conf.items():
            p[k] = v  # validated against the Param's schema, as the trigger form does
    except Exception:
        return True
    return False
def requires_source(d):
    try:
        copy.deepcopy(d.params).validate()
    except Exception:
        return True
    return False
import copy
pmv = bag.dags["post_migration_verification"]
good = {{"source": "redis://10.0.0.5:6379", "target": "conn:new_cache"}}
print(json.dumps({{
    "errors": {{k: str(v) for k, v in bag.import_errors.items()}},
    "dags": {{d.dag_id: {{"tags": sorted(d.tags), "retries": d.default_args.get("retries"),
                          "backoff": d.default_args.get("retry_exponential_backoff"),
                          "policy": type(d.default_args.get("retry_policy")).__name__,
                          "schedule": d.schedule,
                          "params": params(d), "tasks": sorted(d.task_dict),
                          "outlets": {{t: [o.name for o in d.task_dict[t].outlets] for t in d.task_dict}}}}
             for d in bag.dags.values()}},
    "verification_accepts_good": not rejects(pmv, good),
    "verification_requires_endpoints": requires_source(pmv),
    "verification_rejects": [rejects(pmv, {{**good, **bad}}) for bad in (
        {{"kind": "memcached"}}, {{"strictness": "lenient"}}, {{"source": "10.0.0.5:6379"}}, {{"dbs": [-1]}},
        {{"name": "bad name"}})],
}}))
""",
    )
    assert result["errors"] == {}
    dags = result["dags"]
    assert set(dags) == set(DAG_IDS)
    for dag_id in DAG_IDS:
        assert "replica-audit" in dags[dag_id]["tags"]
        assert dags[dag_id]["retries"] == 2 and dags[dag_id]["backoff"] == 2.0, dag_id
        assert dags[dag_id]["policy"] == "ExceptionRetryPolicy", dag_id

    audit = dags["consistency_audit"]
    assert audit["tags"] == ["consistency", "replica-audit"] and audit["schedule"] == "@hourly"
    assert set(audit["params"]) == {"inventory", "out", "pairs", "keep_days", "keep_snapshot_days", "keep_last"}
    assert {"plan", "report", "prune", "audit_pair.snapshot", "audit_pair.gate", "audit_pair.verdict"} <= set(
        audit["tasks"]
    )
    assert audit["outlets"]["audit_pair.verdict"] == ["replica-audit-pair-verdicts"]

    report = dags["data_quality_report"]
    assert report["schedule"] == "@daily" and report["tasks"] == ["render"]
    assert report["params"]["days"]["default"] == 7

    verify = dags["post_migration_verification"]
    assert verify["schedule"] is None
    assert verify["tasks"] == ["certificate", "diff", "gate", "recheck", "snapshot"]
    p = verify["params"]
    assert p["source"]["default"] is None and p["target"]["default"] is None  # required in the trigger form
    assert p["kind"]["default"] == "redis" and p["kind"]["schema"]["enum"] == ["redis", "pika", "mysql"]
    assert p["strictness"]["default"] == "zero_tolerance"
    assert set(p["strictness"]["schema"]["enum"]) == {"zero_tolerance", "allow_ttl_drift", "allow_extra_on_target"}
    assert p["dbs"]["default"] == []
    assert result["verification_accepts_good"] and result["verification_requires_endpoints"]
    assert result["verification_rejects"] == [True] * 5


def test_connection_types_resolve_and_only_source_errors_retry(airflow_env: dict[str, str]) -> None:
    env = dict(
        airflow_env,
        AIRFLOW_CONN_CACHE_NEW=json.dumps(
            {
                "conn_type": "replica_audit_redis",
                "host": "10.1.2.3",
                "port": 7000,
                "login": "auditor",
                "password": "p@ss:w/rd",
                "extra": {"tls": True},
            }
        ),
        AIRFLOW_CONN_PIKA_A=json.dumps({"conn_type": "replica_audit_pika", "host": "10.1.2.4"}),
        AIRFLOW_CONN_ORDERS_DB=json.dumps(
            {
                "conn_type": "replica_audit_mysql",
                "host": "db.internal",
                "port": 3307,
                "login": "reader",
                "password": "pw",
                "schema": "shop",
            }
        ),
        AIRFLOW_CONN_RMQ_A=json.dumps(
            {"conn_type": "replica_audit_rocketmq", "extra": {"store_dir": "/data/rmq/store", "broker_log": "/l"}}
        ),
        AIRFLOW_CONN_RMQ_EMPTY=json.dumps({"conn_type": "replica_audit_rocketmq"}),
        # the official providers' types keep working
        AIRFLOW_CONN_LEGACY_REDIS=json.dumps(
            {"conn_type": "redis", "host": "10.1.2.3", "port": 7000, "password": "x", "extra": {"ssl": True}}
        ),
        AIRFLOW_CONN_LEGACY_MYSQL="mysql://reader:pw@db.internal:3307/shop",
        AIRFLOW_CONN_LEGACY_FS=json.dumps({"conn_type": "fs", "extra": {"path": "/data/rmq/store"}}),
        AIRFLOW_CONN_SOMETHING_ELSE="http://example.invalid",
        # no host: once read as 127.0.0.1
        AIRFLOW_CONN_NO_HOST_DB=json.dumps({"conn_type": "mysql", "login": "reader", "password": "pw", "port": 3307}),
        AIRFLOW_CONN_NO_HOST_PIKA=json.dumps({"conn_type": "replica_audit_pika", "host": ""}),
        # an extra that is not a JSON object: Airflow's extra_dejson reads it as {}, which dropped the TLS
        AIRFLOW_CONN_BAD_EXTRA_DB=json.dumps(
            {"conn_type": "replica_audit_mysql", "host": "db", "password": "pw", "extra": '{"ssl_ca": "/ca.pem",}'}
        ),
        AIRFLOW_CONN_LIST_EXTRA=json.dumps({"conn_type": "replica_audit_redis", "host": "h", "extra": "[1]"}),
        AIRFLOW_CONN_BAD_EXTRA_STORE=json.dumps({"conn_type": "replica_audit_rocketmq", "extra": "{store_dir: /s}"}),
        # variables Airflow cannot read: it skips them and says the connection does not exist
        AIRFLOW_CONN_BAD_PORT=json.dumps({"conn_type": "replica_audit_redis", "host": "h", "port": "63 79"}),
        AIRFLOW_CONN_CUT_JSON='{"conn_type": "replica_audit_redis", "host": "h", "password": "Pw-secret-1"',
        AIRFLOW_CONN_BAD_URI_PORT="replica-audit-redis://:Pw-secret-1@h:99999",
    )
    result = in_airflow(
        env,
        """
from airflow.sdk.exceptions import AirflowException
from audit import ConfigError
from replica_audit_provider.hooks import RedisAuditHook, MySQLAuditHook, RocketMQStoreHook, airflow_conn_resolver
from replica_audit_provider.operators import SOURCE_RETRY_POLICY, SourceUnavailable
import warnings
warnings.simplefilter("ignore", DeprecationWarning)
from replica_audit_airflow.hooks import airflow_conn_resolver as old_resolver
def resolve(conn_id):
    try:
        return airflow_conn_resolver(conn_id)
    except ConfigError as e:
        return "ConfigError: " + str(e)
ids = ["cache_new", "pika_a", "orders_db", "rmq_a", "rmq_empty", "legacy_redis", "legacy_mysql", "legacy_fs",
       "something_else", "nope", "no_host_db", "no_host_pika", "bad_extra_db", "list_extra", "bad_extra_store",
       "bad_port", "cut_json", "bad_uri_port"]
print(json.dumps({
    "resolved": {i: resolve(i) for i in ids},
    "hooks": [RedisAuditHook("cache_new").get_conn(), MySQLAuditHook("orders_db").get_conn(),
              RocketMQStoreHook("rmq_a").get_conn()],
    "rmq_fields": RocketMQStoreHook("rmq_a").fields(),
    "old_name": old_resolver("legacy_fs"),
    "retry_source": SOURCE_RETRY_POLICY.evaluate(SourceUnavailable("down"), 1, 3).action.value,
    "retry_other": SOURCE_RETRY_POLICY.evaluate(RuntimeError("bug"), 1, 3).action.value,
    "retry_airflow": SOURCE_RETRY_POLICY.evaluate(AirflowException("x"), 1, 3).action.value,
}))
""",
    )
    r = result["resolved"]
    assert r["cache_new"] == "rediss://auditor:p%40ss%3Aw%2Frd@10.1.2.3:7000"
    assert r["pika_a"] == "redis://10.1.2.4:9221"
    assert r["orders_db"] == "mysql://reader:pw@db.internal:3307/shop"
    # a store connection with more than its directory resolves to the whole endpoint (the RocketMQ model reads it)
    assert json.loads(r["rmq_a"]) == {"store_dir": "/data/rmq/store", "broker_log": "/l"}
    assert r["rmq_empty"].startswith("ConfigError: conn:rmq_empty: a file-store connection needs extra")
    assert r["legacy_redis"] == "rediss://:x@10.1.2.3:7000"
    assert r["legacy_mysql"] == "mysql://reader:pw@db.internal:3307/shop"
    assert r["legacy_fs"] == result["old_name"] == "/data/rmq/store"
    assert r["something_else"].startswith("ConfigError: conn:something_else: connection type 'http'")
    assert r["nope"] == "ConfigError: conn:nope: no such Airflow connection"
    for conn_id in ("no_host_db", "no_host_pika"):
        assert r[conn_id].startswith(f"ConfigError: conn:{conn_id}: the connection has no host"), r[conn_id]
    for conn_id in ("bad_extra_db", "bad_extra_store"):
        assert r[conn_id].startswith(f"ConfigError: conn:{conn_id}: its extra is not JSON ("), r[conn_id]
    assert r["list_extra"].startswith("ConfigError: conn:list_extra: its extra is a JSON list, not an object")
    said = "ConfigError: conn:{}: Airflow could not read it: AIRFLOW_CONN_{}"
    assert r["bad_port"] == said.format("bad_port", "BAD_PORT") + ": port '63 79' is not a number"
    assert r["cut_json"] == said.format("cut_json", "CUT_JSON") + " is not valid JSON"
    assert r["bad_uri_port"].startswith(said.format("bad_uri_port", "BAD_URI_PORT") + " is not a connection URI")
    assert "Pw-secret-1" not in json.dumps(r)
    assert result["hooks"] == [r["cache_new"], r["orders_db"], "/data/rmq/store"]
    assert result["rmq_fields"] == {"store_dir": "/data/rmq/store", "broker_log": "/l"}
    assert (result["retry_source"], result["retry_other"], result["retry_airflow"]) == ("retry", "fail", "fail")


def airflow_db(env: dict[str, str], sql: str) -> list[tuple[Any, ...]]:
    db = sqlite3.connect(Path(env["AIRFLOW_HOME"]) / "airflow.db")
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


def asset_events(env: dict[str, str]) -> list[tuple[str, dict[str, Any], str]]:
    rows = airflow_db(
        env,
        "SELECT a.uri, e.extra, e.source_task_id FROM asset_event e JOIN asset a ON a.id = e.asset_id ORDER BY e.id",
    )
    return [(uri.rstrip("/"), json.loads(extra), task) for uri, extra, task in rows]  # Airflow appends a "/"


def test_consistency_audit_fails_on_divergence_and_feeds_the_daily_report(
    airflow_env: dict[str, str], tmp_path: Path
) -> None:
    master, replica = start_pair(tmp_path / "servers")
    try:
        c = master.client()
        c.mset({f"k{i}": i for i in range(3000)})
        wait_in_sync(master, replica)
        replica.client().config_set("replica-read-only", "no")
        replica.client().delete("k7")
        # every kind goes through the same mapped task group: a healthy files-only Pika pair and a
        # RocketMQ pair built from the real broker-written commit log ride along
        pika = _healthy_pika_logs(tmp_path / "pika")
        stores = {side: tmp_path / "rmq" / side for side in ("master", "slave")}  # one store twice is refused
        for store in stores.values():
            (store / "commitlog").mkdir(parents=True)
            shutil.copy(FIXTURES / "rocketmq" / "00000000000000000000", store / "commitlog")
        inv = write_inventory(
            tmp_path / "inv.yaml",
            [
                {"name": "dag-pair", "kind": "redis", "master": master.url, "replica": replica.url},
                {"name": "dag-pika", "kind": "pika", "dbs": [0, 1], "binlog": pika},
                {
                    "name": "dag-mq",
                    "kind": "rocketmq",
                    "master": {"store_dir": str(stores["master"])},
                    "replica": {"store_dir": str(stores["slave"])},
                },
            ],
        )
        done = dags_test(airflow_env, "consistency_audit", {"inventory": str(inv), "out": str(tmp_path / "out")})
    finally:
        replica.stop()
        master.stop()
    log = done.stdout + done.stderr
    assert done.returncode != 0, log[-3000:]  # the gate failed, so the run failed
    assert "gate failed: missing_on_replica=1" in log
    root = latest_run(tmp_path / "out")
    assert [(f["category"], f["key"]) for f in findings(root)] == [("missing_on_replica", b"k7")]
    statuses = {p["pair"]: p["status"] for p in summary(root)["pairs"]}
    assert statuses == {"dag-pair": "failed", "dag-pika": "passed", "dag-mq": "passed"}
    assert (root / "report.html").exists()
    # every pair's asset got its verdict, the failed pair's too; the one a DAG schedules on is active
    # this run's events only: the session's Airflow DB also holds other tests' runs
    events = {uri: (extra, task) for uri, extra, task in asset_events(airflow_env) if extra["run_id"] == root.name}
    assert set(events) == {"replica-audit://dag-pair", "replica-audit://dag-pika", "replica-audit://dag-mq"}
    extra, task = events["replica-audit://dag-pair"]
    assert task == "audit_pair.verdict"
    assert extra["status"] == "failed" and extra["counts"] == {"missing_on_replica": 1}
    assert extra["failed_checks"] == ["missing_on_replica"] and extra["run_id"] == root.name
    assert extra["airflow_run_id"] and extra["airflow_run_id"] != root.name  # the DAG run's own id, unsanitised
    assert events["replica-audit://dag-pika"][0]["status"] == "passed"
    aliased = airflow_db(
        airflow_env,
        "SELECT count(*) FROM asset_alias_asset_event x JOIN asset_event e ON e.id = x.event_id"
        f" WHERE json_extract(e.extra, '$.run_id') = '{root.name}'",
    )
    assert aliased == [(3,)]  # each event went through the alias
    active = {uri.rstrip("/") for (uri,) in airflow_db(airflow_env, "SELECT a.uri FROM asset_active a")}
    assert "replica-audit://dag-pair" in active
    queued = airflow_db(
        airflow_env,
        "SELECT q.target_dag_id, a.uri FROM asset_dag_run_queue q JOIN asset a ON a.id = q.asset_id",
    )
    assert [(dag, uri.rstrip("/")) for dag, uri in queued] == [("downstream_of_dag_pair", "replica-audit://dag-pair")]

    done = dags_test(airflow_env, "data_quality_report", {"out": str(tmp_path / "out"), "days": 2})
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    daily = list((tmp_path / "out" / "reports").glob("daily-*.html"))
    assert len(daily) == 1
    html = daily[0].read_text()
    assert 'data-pair="dag-pair"' in html and f'href="../{root.name}/report.html"' in html
    assert 'data-chart="categories"' in html


def test_a_kind_of_the_tests_own_runs_through_the_dag(airflow_env: dict[str, str], tmp_path: Path) -> None:
    """tests/kinds/dirfiles.py: its own module, one registry entry and its suite are all the DAG needs."""
    from tests.integration.test_own_kind import REGISTRY_ENTRY, inventory, make_dirs

    master, replica = make_dirs(tmp_path)
    (replica / "same.txt").write_bytes(b"changed")
    # `tests` importable by the installed Airflow, without the checkout's `audit` shadowing the wheel's
    path = tmp_path / "kinds-path"
    path.mkdir()
    (path / "tests").symlink_to(REPO / "tests", target_is_directory=True)
    env = dict(airflow_env, REPLICA_AUDIT_KINDS=REGISTRY_ENTRY, PYTHONPATH=str(path))
    inv = inventory(tmp_path / "inv.yaml", master, replica)
    done = dags_test(env, "consistency_audit", {"inventory": str(inv), "out": str(tmp_path / "out")})
    assert done.returncode != 0, (done.stdout + done.stderr)[-3000:]  # its gate failed, so the run did
    root = latest_run(tmp_path / "out")
    assert [(f["kind"], f["check"], f["category"], f["key"]) for f in findings(root)] == [
        ("dirfiles", "files", "value_mismatch", b"same.txt")
    ]
    assert summary(root)["pairs"][0]["status"] == "failed"


def _healthy_pika_logs(root: Path) -> dict[str, Any]:
    from tests.pika_scenarios import commands, healthy_plan, write_master, write_slave

    for db in (0, 1):
        m = write_master(root / "m", db, commands(600, db), 64 * 1024)
        write_slave(root / "s", db, m, healthy_plan(0, 600), 64 * 1024)
    return {"master_dir": str(root / "m"), "replica_dir": str(root / "s"), "file_size": 64 * 1024}


def _migration(tmp_path: Path) -> tuple[RedisServer, RedisServer]:
    """Two independent servers holding the same data in db 0 and db 3: a migration's source and target."""
    source = RedisServer(free_port(), tmp_path / "source").start()
    target = RedisServer(free_port(), tmp_path / "target").start()
    for server in (source, target):
        load_sample(server.client(0), n_keys=3000, big_hash_fields=2000)
        load_sample(server.client(3), n_keys=500, big_hash_fields=10, seed=3)
    return source, target


def _verify(
    env: dict[str, str], tmp_path: Path, conf: dict[str, Any]
) -> tuple[subprocess.CompletedProcess[str], Path, dict[str, Any]]:
    out = tmp_path / "out"
    done = dags_test(
        env, "post_migration_verification", {"out": str(out), "settings": {"recheck_interval_s": 0.2}, **conf}
    )
    roots = [p.parent for p in out.glob("*/certificate.json")]
    assert len(roots) == 1, (done.stdout + done.stderr)[-3000:]
    return done, roots[0], json.loads((roots[0] / "certificate.json").read_text())


SOURCE_SECRET = "S0urce:pw@/#x"


def test_post_migration_verification_certifies_a_faithful_migration(
    airflow_env: dict[str, str], tmp_path: Path
) -> None:
    source, target = _migration(tmp_path)
    try:
        target.client().config_set("requirepass", "t4rget-s3cret")  # read through an Airflow connection
        source.client().config_set("requirepass", SOURCE_SECRET)  # typed into the form's URL
        env = dict(
            airflow_env,
            AIRFLOW_CONN_MIGRATION_TARGET=json.dumps(
                {
                    "conn_type": "replica_audit_redis",
                    "host": "127.0.0.1",
                    "port": target.port,
                    "password": "t4rget-s3cret",
                }
            ),
        )
        source_url = f"redis://:{quote(SOURCE_SECRET, safe='')}@127.0.0.1:{source.port}"
        # a name native rendering would read as a number (2024), kept as the text it is
        done, root, cert = _verify(
            env, tmp_path, {"source": source_url, "target": "conn:migration_target", "name": "2024"}
        )
    finally:
        source.stop()
        target.stop()
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert cert["verdict"] == "passed" and cert["reasons"] == []
    assert cert["pair"] == "2024" and cert["kind"] == "redis" and cert["strictness"] == "zero_tolerance"
    assert all(v == 0 for k, v in cert["thresholds"].items() if k != "max_lag_seconds")
    src, tgt = cert["source"]["content"], cert["target"]["content"]
    assert src["keys"] == tgt["keys"] == 3502  # 3000 + big hash in db 0, 500 + big hash in db 3
    assert src["keys_per_db"] == tgt["keys_per_db"] == {"0": 3001, "3": 501}
    assert src["digest"] == tgt["digest"] and cert["digests_equal"] is True
    assert cert["compared"]["keys_compared"] == 3502 and cert["compared"]["dbs"] == [0, 3]
    assert cert["source"]["version"] and cert["target"]["version"] and cert["tool_version"]
    assert cert["target"]["endpoint"].endswith(f"127.0.0.1:{target.port}")
    assert cert["target"]["given"] == "conn:migration_target" and cert["source"]["given"].endswith(f":{source.port}")
    assert cert["gate"]["success"] is True and cert["gate"]["failed"] == []
    html = (root / "certificate.html").read_text()
    assert 'id="verdict">passed<' in html and src["digest"] in html
    for path in root.rglob("*"):  # neither password is in any output
        if path.is_file() and path.suffix in (".json", ".html", ".yml", ".yaml"):
            text = path.read_text(errors="replace")
            assert "t4rget-s3cret" not in text and SOURCE_SECRET not in text, path
    # nor in the rendered fields Airflow keeps for its UI (the form's own conf is the user's to keep)
    with sqlite3.connect(Path(env["AIRFLOW_HOME"]) / "airflow.db") as db:
        rendered = [r[0] for r in db.execute("SELECT rendered_fields FROM rendered_task_instance_fields")]
    assert any("2024" in r for r in rendered) and any("127.0.0.1" in r for r in rendered)
    for secret in (SOURCE_SECRET, quote(SOURCE_SECRET, safe="")):
        assert not [r for r in rendered if secret in r], secret


def test_post_migration_verification_refuses_a_diverging_target(airflow_env: dict[str, str], tmp_path: Path) -> None:
    source, target = _migration(tmp_path)
    try:
        planted = plant_divergences(target.client(3), db=3)
        done, root, cert = _verify(airflow_env, tmp_path, {"source": source.url, "target": target.url})
    finally:
        source.stop()
        target.stop()
    log = done.stdout + done.stderr
    assert done.returncode != 0, log[-3000:]
    assert "verification failed" in log
    assert cert["verdict"] == "failed"
    failed = {f["column"] for f in cert["gate"]["failed"]}
    assert {p.category for p in planted} <= failed  # zero tolerance: the TTL drift fails too
    assert cert["findings"]["missing_on_replica"] == 1 and cert["findings"]["value_mismatch"] == 2
    assert cert["digests_equal"] is False
    assert cert["source"]["content"]["keys_per_db"]["3"] == 501 and cert["target"]["content"]["keys_per_db"]["3"] == 501
    assert any(r.startswith("gate failed: ") for r in cert["reasons"])
    assert 'id="verdict">failed<' in (root / "certificate.html").read_text()
    assert summary(root)["pairs"][0]["status"] == "failed"


def test_post_migration_verification_refuses_a_target_connection_without_host(
    airflow_env: dict[str, str], tmp_path: Path
) -> None:
    """The target's connection, stored in Airflow's metadata database, has a port but no host: it was read
    as 127.0.0.1, and a redis-server listening there on that port was certified as the target."""
    local = RedisServer(free_port(), tmp_path / "local").start()
    try:
        local.client().set("k", "v")
        cli = [airflow_env["AIRFLOW_PYTHON"], "-m", "airflow", "connections", "add", "nohost_target"]
        add = subprocess.run(
            [*cli, "--conn-type", "replica_audit_redis", "--conn-port", str(local.port)],
            env=airflow_env,
            cwd=airflow_env["AIRFLOW_HOME"],
            capture_output=True,
            text=True,
        )
        assert add.returncode == 0, add.stderr[-3000:]
        assert airflow_db(airflow_env, "SELECT host, port FROM connection WHERE conn_id = 'nohost_target'") == [
            (None, local.port)
        ]
        done, root, cert = _verify(airflow_env, tmp_path, {"source": local.url, "target": "conn:nohost_target"})
    finally:
        local.stop()
    log = done.stdout + done.stderr
    assert done.returncode != 0, log[-3000:]
    assert cert["verdict"] == "error" and cert["digests_equal"] is False
    said = " ".join(" ".join(cert["reasons"]).split())
    assert "conn:nohost_target: the connection has no host" in said, cert["reasons"]
    assert summary(root)["pairs"][0]["exit_code"] == 2
