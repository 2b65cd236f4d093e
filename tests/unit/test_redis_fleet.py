"""Redis fleet building blocks without servers: endpoints, cluster reply parsers, health rules, slots,
display quoting, compare modes and repair plans (replies shaped as a Redis 7.0 cluster sends them)."""

from __future__ import annotations

import pickle
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from redis.connection import parse_url

from audit.diff.compare_modes import COMPARE_MODES, apply_mode, mode_category
from audit.errors import ConfigError
from audit.findings import Finding
from audit.sources.redis.display import quote, short_value, unquote
from audit.sources.redis.endpoints import NodeEndpoint, SentinelEndpoint, display, node_url, parse_endpoint
from audit.sources.redis.fleet_health import (
    NodeState,
    shard_replication_findings,
    topology_findings,
    wrong_master_findings,
)
from audit.sources.redis.keyfilter import KeyFilter, KeysSpec
from audit.sources.redis.repair import findings_rows, parse_line, write_plan
from audit.sources.redis.replication import Sample
from audit.sources.redis.routing import crc16, key_slot, parse_redirect
from audit.sources.redis.topology import (
    Node,
    Shard,
    SlotMove,
    Topology,
    parse_cluster_nodes,
    parse_cluster_shards,
    parse_cluster_slots,
    uncovered_slots,
)

# --- endpoints ----------------------------------------------------------------------------------------------


def test_endpoint_forms_and_secrets() -> None:
    plain = parse_endpoint("redis://auditor:s3cret@10.0.0.5:6379", "pairs[0] (a).master")
    assert isinstance(plain, NodeEndpoint) and plain.topology == "standalone"
    assert plain.resolve() == "redis://auditor:s3cret@10.0.0.5:6379"
    cluster = parse_endpoint({"url": "redis://:pw@10.0.0.5:7000", "topology": "cluster"}, "x")
    assert isinstance(cluster, NodeEndpoint) and cluster.topology == "cluster"
    sentinel = parse_endpoint(
        {"sentinels": ["10.0.0.1:26379", "redis://:spw@10.0.0.2:26379"], "service": "mymaster", "password": "pw"}, "x"
    )
    assert isinstance(sentinel, SentinelEndpoint)
    assert sentinel.node_url("10.0.0.9", 6380) == "redis://:pw@10.0.0.9:6380"
    for model in (plain, cluster, sentinel):
        assert "s3cret" not in repr(model) and "pw@" not in repr(model) and "spw" not in repr(model)
    assert parse_endpoint(None, "x") is None
    assert display(plain) == "redis://auditor:***@10.0.0.5:6379"
    assert display(cluster) == "redis://:***@10.0.0.5:7000 (cluster)"
    assert display(sentinel) == "sentinel 10.0.0.1:26379,10.0.0.2:26379 service mymaster"
    assert display(parse_endpoint({"url": "conn:cache", "topology": "cluster"}, "x")) == "conn:cache (cluster)"  # type: ignore[arg-type]
    assert node_url("rediss://u:p%40w@seed:7000/3", "10.0.0.1", 7001) == "rediss://u:p%40w@10.0.0.1:7001"
    assert node_url("redis://seed:7000", "::1", 7001) == "redis://[::1]:7001"
    # a TLS cluster's private CA reaches every node, not the seed alone; a db stays the seed's
    tls_seed = "rediss://seed:7000/0?ssl_ca_certs=/etc/ca.pem&db=0&ssl_cert_reqs=required"
    assert node_url(tls_seed, "h", 7001) == "rediss://h:7001?ssl_ca_certs=/etc/ca.pem&ssl_cert_reqs=required"


@pytest.mark.parametrize(
    ("value", "names"),
    [
        ({"url": "http://h:1", "topology": "cluster"}, "pairs[0] (s).master.url: expected redis://"),
        ({"url": "redis://h:1", "topology": "mesh"}, "pairs[0] (s).master.topology"),
        ({"url": "unix:///tmp/r.sock", "topology": "cluster"}, "topology: cluster needs a TCP node"),
        ({"sentinels": ["10.0.0.1"], "service": "m"}, "master.sentinels: sentinel '10.0.0.1': expected host:port"),
        ({"sentinels": ["redis://:s3cret@h"], "service": "m"}, "sentinel 'h'"),
        ({"sentinels": [], "service": "m"}, "master.sentinels"),
        ({"sentinels": ["h:1"]}, "master.service: Field required"),
        ({"url": "redis://h:1", "topo": "cluster"}, "master.topo: Extra inputs are not permitted"),
        ({"topology": "cluster"}, "master.url: Field required"),
        (["redis://h:1"], "expected a URL or a mapping"),
        ({"sentinels": ["h:1"], "service": "m", "ssl_ca_certs": "/ca.pem", "tls": False}, "master: tls: false, but"),
        ({"sentinels": ["h:1"], "service": "m", "ssl_keyfile": "/k.pem"}, "master: ssl_keyfile: needs ssl_certfile"),
        ({"sentinels": ["h:1"], "service": "m", "ssl_ca_certs": ""}, "master.ssl_ca_certs: String should have"),
    ],
)
def test_bad_endpoints_name_the_field(value: object, names: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_endpoint(value, "pairs[0] (s).master")  # type: ignore[arg-type]
    assert names in str(e.value)
    assert "s3cret" not in str(e.value)


def test_sentinel_tls_files_reach_every_data_node_url_and_imply_tls() -> None:
    # a sentinel group had `tls` only: its data nodes were reached with the system CAs and no client
    # certificate, so a private CA's nodes all failed verification (exit 3)
    ep = parse_endpoint(
        {"sentinels": ["rediss://h:26380?ssl_ca_certs=/s/ca.pem"], "service": "m", "username": "a", "password": "p&w",
         "ssl_ca_certs": "/etc/redis/ca & co.pem", "ssl_certfile": "/c.pem", "ssl_keyfile": "/k.pem"}, "x",
    )  # fmt: skip
    assert isinstance(ep, SentinelEndpoint) and ep.tls
    url = ep.node_url("10.0.0.9", 6380)
    assert (
        url
        == "rediss://a:p%26w@10.0.0.9:6380?ssl_ca_certs=/etc/redis/ca%20%26%20co.pem&ssl_certfile=/c.pem&ssl_keyfile=/k.pem"
    )
    kwargs = parse_url(url)
    assert (kwargs["ssl_ca_certs"], kwargs["ssl_certfile"], kwargs["password"]) == (
        "/etc/redis/ca & co.pem",
        "/c.pem",
        "p&w",
    )
    assert ep.sentinel_urls() == ["rediss://h:26380?ssl_ca_certs=/s/ca.pem"]  # a sentinel's own options kept
    no_files = parse_endpoint({"sentinels": ["h:1"], "service": "m", "tls": True}, "x")
    assert isinstance(no_files, SentinelEndpoint) and no_files.node_url("h", 1) == "rediss://h:1"


def test_sentinel_tls_files_that_do_not_load_are_config_errors_naming_the_field(tmp_path: Path) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    cases = [
        ({"ssl_ca_certs": str(tmp_path / "missing.pem")}, f"ssl_ca_certs {tmp_path / 'missing.pem'}: no such readable"),
        ({"ssl_ca_certs": str(tmp_path)}, "ssl_ca_certs"),  # a directory
        ({"ssl_ca_certs": str(junk)}, f"ssl_ca_certs {junk}: no CA certificate (PEM)"),
        ({"ssl_certfile": str(junk)}, f"ssl_certfile {junk}: not a certificate and its key"),
    ]
    for files, said in cases:
        ep = SentinelEndpoint.model_validate({"sentinels": ["h:1"], "service": "m", **files})
        with pytest.raises(ConfigError) as e:
            ep.check_tls_files("pair ha master")
        assert str(e.value).startswith("pair ha master: ") and said in str(e.value)
    SentinelEndpoint.model_validate({"sentinels": ["h:1"], "service": "m", "tls": True}).check_tls_files("x")


# --- cluster replies -------------------------------------------------------------------------------------------

ID = {n: f"{n:040x}" for n in range(1, 8)}


def _node(n: int, port: int, role: str, health: str = "online", endpoint: bytes = b"127.0.0.1") -> list[object]:
    return [
        b"id", ID[n].encode(), b"port", port, b"ip", b"127.0.0.1", b"endpoint", endpoint,
        b"role", role.encode(), b"replication-offset", 0, b"health", health.encode(),
    ]  # fmt: skip


SHARDS_REPLY = [
    [b"slots", [10923, 16383], b"nodes", [_node(3, 7002, "master"), _node(6, 7005, "replica", "loading")]],
    [b"slots", [0, 5460], b"nodes", [_node(1, 7000, "master"), _node(4, 7003, "replica")]],
    [
        b"slots",
        [5461, 10000, 10002, 10922],
        b"nodes",
        [_node(2, 7001, "master", endpoint=b"?"), _node(5, 7004, "replica")],
    ],
    [b"slots", [], b"nodes", [_node(7, 7006, "master")]],
]
SLOTS_REPLY = [
    [0, 5460, [b"127.0.0.1", 7000, ID[1].encode(), []], [b"127.0.0.1", 7003, ID[4].encode(), []]],
    [5461, 10000, [b"127.0.0.1", 7001, ID[2].encode(), []], [b"127.0.0.1", 7004, ID[5].encode(), []]],
    [10002, 10922, [b"", 7001, ID[2].encode(), []], [b"127.0.0.1", 7004, ID[5].encode(), []]],
    [10923, 16383, [b"127.0.0.1", 7002, ID[3].encode(), []], [b"127.0.0.1", 7005, ID[6].encode(), []]],
]
NODES_TEXT = (
    f"{ID[1]} 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5459 5460 [5460->-{ID[2]}]\n"
    f"{ID[2]} 127.0.0.1:7001@17001,host-b master - 0 1 2 connected 5461-10922 [93-<-{ID[3]}]\n"
    f"{ID[4]} 127.0.0.1:7003@17003 slave,fail {ID[1]} 0 1 1 disconnected\n"
    f"{ID[5]} :0@0 master,noaddr - 0 1 0 disconnected\n"
)


def test_cluster_shards_reply() -> None:
    shards = parse_cluster_shards(SHARDS_REPLY, "seed-host")
    by_port = {s.nodes[0].port: s for s in shards}
    assert by_port[7001].slots == ((5461, 10000), (10002, 10922))
    assert by_port[7001].nodes[0].host == "127.0.0.1"  # endpoint '?' falls back to the ip
    assert [(n.port, n.role, n.health) for n in by_port[7002].nodes] == [
        (7002, "master", "online"),
        (7005, "replica", "loading"),
    ]
    assert by_port[7006].slots == ()


def test_cluster_shards_tls_ports() -> None:
    # a TLS client uses `tls-port`; a TLS-only cluster lists no `port` at all (was a KeyError: exit 4)
    both = [[b"slots", [0, 16383], b"nodes", [[b"id", b"a" * 40, b"port", 7000, b"tls-port", 8000, b"ip",
             b"127.0.0.1", b"role", b"master", b"health", b"online"]]]]  # fmt: skip
    only_tls = [[b"slots", [0, 16383], b"nodes", [[b"id", b"a" * 40, b"tls-port", 8000, b"ip", b"127.0.0.1",
                 b"role", b"master", b"health", b"online"]]]]  # fmt: skip
    assert parse_cluster_shards(both, "h")[0].nodes[0].port == 7000
    assert parse_cluster_shards(both, "h", tls=True)[0].nodes[0].port == 8000
    assert parse_cluster_shards(only_tls, "h")[0].nodes[0].port == 8000


def test_cluster_slots_reply_groups_ranges_by_master() -> None:
    shards = parse_cluster_slots(SLOTS_REPLY, "seed-host")
    assert len(shards) == 3
    two = next(s for s in shards if s.nodes[0].node_id == ID[2])
    assert two.slots == ((5461, 10000), (10002, 10922))
    assert [n.port for n in two.nodes] == [7001, 7004]  # the replica listed twice is kept once
    assert uncovered_slots([r for s in shards for r in s.slots]) == [(10001, 10001)]


def test_cluster_nodes_lines() -> None:
    lines = {n.node_id: n for n in parse_cluster_nodes(NODES_TEXT, "seed-host")}
    one = lines[ID[1]]
    assert one.slots == ((0, 5459), (5460, 5460)) and one.migrating == {5460: ID[2]} and "myself" in one.flags
    assert lines[ID[2]].importing == {93: ID[3]} and lines[ID[2]].port == 7001
    assert lines[ID[4]].master_id == ID[1] and not lines[ID[4]].is_master
    assert lines[ID[5]].host == "seed-host"  # a node without an address


def test_uncovered_slots() -> None:
    assert uncovered_slots([(0, 16383)]) == []
    assert uncovered_slots([]) == [(0, 16383)]
    assert uncovered_slots([(5, 10), (0, 3), (8, 20)]) == [(4, 4), (21, 16383)]


# --- health rules --------------------------------------------------------------------------------------------


def _n(port: int) -> Node:
    return Node("127.0.0.1", port, f"redis://:pw@127.0.0.1:{port}")


def test_topology_findings() -> None:
    topo = Topology(
        "cluster",
        "redis://:***@127.0.0.1:7000",
        (Shard(_n(7000), (_n(7003),), ((0, 99),)), Shard(_n(7001), (), ((200, 16383),))),
        cluster_state="fail",
        uncovered=((100, 199),),
        moves=(SlotMove(42, "migrating", "127.0.0.1:7000", "127.0.0.1:7001"),),
    )
    got = {f.category: f for f in topology_findings(topo)}
    assert (got["uncovered_slots"].start_num, got["uncovered_slots"].end_num, got["uncovered_slots"].count) == (
        100,
        199,
        100,
    )
    assert got["cluster_down"].evidence == {"cluster_state": "fail"}
    assert got["slot_migration"].severity == "info"
    assert got["slot_migration"].evidence == {"shard": "127.0.0.1:7000", "state": "migrating", "peer": "127.0.0.1:7001"}
    assert topology_findings(Topology("cluster", "s", (), cluster_state="ok")) == []


def _info(role: str, host: str = "", port: int = 0, replid: str = "r1") -> dict[str, object]:
    if role == "master":
        return {"role": "master", "master_replid": replid, "master_repl_offset": "10"}
    return {
        "role": "slave",
        "master_host": host,
        "master_port": str(port),
        "master_link_status": "up",
        "master_replid": replid,
    }


def test_wrong_master_names_shard_and_replica() -> None:
    topo = Topology(
        "cluster",
        "s",
        (Shard(_n(7000), (_n(7003),), ((0, 8000),)), Shard(_n(7001), (_n(7004),), ((8001, 16383),))),
    )
    healthy = {
        "127.0.0.1:7000": NodeState("127.0.0.1:7000", _info("master", replid="a")),
        "127.0.0.1:7001": NodeState("127.0.0.1:7001", _info("master", replid="b")),
        "127.0.0.1:7003": NodeState("127.0.0.1:7003", _info("slave", "127.0.0.1", 7000, "a")),
        "127.0.0.1:7004": NodeState("127.0.0.1:7004", _info("slave", "127.0.0.1", 7001, "b")),
    }
    assert wrong_master_findings(topo, healthy) == []
    moved = {**healthy, "127.0.0.1:7003": NodeState("127.0.0.1:7003", _info("slave", "127.0.0.1", 7001, "b"))}
    (f,) = wrong_master_findings(topo, moved)
    assert f.category == "wrong_master"
    assert (f.evidence["shard"], f.evidence["replica"], f.evidence["follows_shard"]) == (
        "127.0.0.1:7000",
        "127.0.0.1:7003",
        "127.0.0.1:7001",
    )
    demoted = {**healthy, "127.0.0.1:7001": NodeState("127.0.0.1:7001", _info("slave", "127.0.0.1", 7004, "b"))}
    (g,) = wrong_master_findings(topo, demoted)
    assert g.evidence["shard"] == "127.0.0.1:7001" and "reports itself a replica" in g.evidence["reason"]


def test_shard_replication_findings_tag_and_dedupe() -> None:
    master = {
        "role": "master",
        "master_replid": "a",
        "master_repl_offset": "500",
        "slave0": {"ip": "127.0.0.1", "port": "0", "state": "online", "offset": "0", "lag": "9"},
    }
    down = {"role": "slave", "master_link_status": "down", "slave_repl_offset": "100", "master_replid": "a"}
    samples = [Sample(1000, master, down), Sample(2100, master, down)]
    shard = Shard(_n(7000), (_n(7003), _n(7006)))
    got = shard_replication_findings([(shard, r, samples) for r in shard.replicas], None, None)
    link = [f for f in got if f.category == "link_down"]
    assert [f.evidence["replica"] for f in link] == ["127.0.0.1:7003", "127.0.0.1:7006"]
    assert all(f.evidence["shard"] == "127.0.0.1:7000" for f in got)
    assert len([f for f in got if f.category == "lag_metric_unreliable"]) == 1  # the master's, once


# --- slots and redirects ------------------------------------------------------------------------------------


def test_key_slot_matches_the_cluster_spec() -> None:
    # values from the cluster specification and CLUSTER KEYSLOT
    assert key_slot(b"foo") == 12182 and key_slot(b"bar") == 5061 and key_slot(b"") == 0
    assert key_slot(b"{user1000}.following") == key_slot(b"{user1000}.followers") == key_slot(b"user1000")
    assert key_slot(b"foo{}{bar}") == crc16(b"foo{}{bar}") % 16384  # an empty first tag: the whole key
    assert key_slot(b"foo{{bar}}zap") == key_slot(b"{bar")


def test_parse_redirect() -> None:
    assert parse_redirect("MOVED 3999 127.0.0.1:6381") == ("MOVED", 3999, "127.0.0.1:6381")
    assert parse_redirect("ASK 1 [::1]:7000") == ("ASK", 1, "[::1]:7000")
    assert parse_redirect("CLUSTERDOWN The cluster is down") is None and parse_redirect(None) is None


# --- key filters, display ---------------------------------------------------------------------------------------


def test_key_filter_spec_and_pickling() -> None:
    assert KeyFilter.of(None) is None and KeyFilter.of(KeysSpec()) is None
    f = KeyFilter.of(KeysSpec(include=["user:*"], exclude=["user:tmp*"]))
    assert f is not None and f.scan_match() == b"user:*"
    assert f.keep([b"user:1", b"user:tmp1", b"cart:1"]) == [b"user:1"] and f.filtered_out == 2
    g = pickle.loads(pickle.dumps(f))
    assert g.keep([b"user:2", b"x"]) == [b"user:2"] and g.filtered_out == 3
    assert f.describe() == {"include": ["user:*"], "exclude": ["user:tmp*"], "scan_match": "user:*"}
    with pytest.raises(ValueError):
        KeysSpec(include=["a"], excluded=["b"])  # type: ignore[call-arg]


def test_quote_round_trips_every_byte() -> None:
    every = bytes(range(256))
    assert unquote(quote(every)) == every
    assert quote(b'a"b\\c\n\x00 d') == '"a\\"b\\\\c\\n\\x00 d"'
    assert short_value(b"x" * 64) == '"' + "x" * 64 + '"' and short_value(b"x" * 65) is None
    assert short_value(b"v", show=False) is None


# --- compare modes ----------------------------------------------------------------------------------------------

ROWS = [
    # category, m_length, r_length, m_status, r_status
    ("missing_on_replica", 1, None, "ok", None),
    ("extra_on_replica", None, 1, None, "ok"),
    ("type_mismatch", 1, 1, "ok", "ok"),
    ("value_mismatch", 3, 3, "ok", "ok"),  # same length, other digest
    ("value_mismatch", 3, 4, "ok", "ok"),
    ("value_mismatch", 3, 3, "unstable", "ok"),
    ("ttl_mismatch", 3, 3, "ok", "ok"),
]
EXPECTED = {
    "full": [r[0] for r in ROWS],
    "length": [
        "missing_on_replica",
        "extra_on_replica",
        "type_mismatch",
        None,
        "value_mismatch",
        "value_mismatch",
        "ttl_mismatch",
    ],
    "keys": ["missing_on_replica", "extra_on_replica", None, None, None, None, None],
}


@pytest.mark.parametrize("mode", COMPARE_MODES)
def test_compare_modes_python_and_spark_agree(spark, mode: str) -> None:  # type: ignore[no-untyped-def]
    py = [mode_category(c, mode, m_length=ml, r_length=rl, m_status=ms, r_status=rs) for c, ml, rl, ms, rs in ROWS]
    assert py == EXPECTED[mode]
    df = spark.createDataFrame(
        [(i, *r) for i, r in enumerate(ROWS)],
        "i int, category string, m_length long, r_length long, m_status string, r_status string",
    )
    got = [r["category"] for r in apply_mode(df, mode).orderBy("i").collect()]
    assert got == EXPECTED[mode]


def test_length_mode_keeps_the_ttl_of_a_value_it_ignores(spark) -> None:  # type: ignore[no-untyped-def]
    # value and TTL both differ, same count: `classify` says value_mismatch, and `length` dropped the key
    # whole, though it compares TTLs (the recheck reported nothing: tests/integration/test_redis_fleet_oracle.py)
    row = ("value_mismatch", 3, 3, "ok", "ok", 10_000, None)
    py = mode_category(*row[:1], "length", m_length=3, r_length=3, m_status="ok", r_status="ok", ttl_differs=True)
    df = spark.createDataFrame(
        [row],
        "category string, m_length long, r_length long, m_status string, r_status string, "
        "m_expire_at_ms long, r_expire_at_ms long",
    )
    (got,) = apply_mode(df, "length", ttl_tolerance_ms=2000).collect()
    assert py == got["category"] == "ttl_mismatch"


def test_unknown_compare_mode() -> None:
    with pytest.raises(ValueError, match="unknown compare mode 'digest'"):
        mode_category("value_mismatch", "digest")


# --- repair plans -------------------------------------------------------------------------------------------------


def test_repair_plan_lines_round_trip(tmp_path) -> None:  # type: ignore[no-untyped-def]
    findings = [
        Finding("keyspace", "missing_on_replica", db=0, key=b"user:1"),
        Finding("keyspace", "extra_on_replica", db=3, key=b"tmp key\x00"),
        Finding("keyspace", "value_mismatch", db=0, key=b'q"\n'),
        Finding("replication", "link_down"),
        {"category": "ttl_mismatch", "db": 1, "key": bytearray(b"\xff")},
        {"category": "type_mismatch", "db": 0, "key": None},
    ]
    counts = write_plan(findings, tmp_path, pair="p1", run_id="r1", master="redis://m:1", replica="redis://:***@r:2")
    assert (counts.resync, counts.delete) == (3, 1) and counts.path == tmp_path / "repair" / "p1.txt"
    text = counts.path.read_text()
    assert "never executed" in text and "***" in text
    entries = [e for e in map(parse_line, text.splitlines()) if e is not None]
    assert entries == [
        ("RESYNC", 0, b"user:1"),
        ("RESYNC", 0, b'q"\n'),
        ("RESYNC", 1, b"\xff"),
        ("DELETE", 3, b"tmp key\x00"),
    ]
    assert 'RESYNC 0 "q\\"\\n"' in text.splitlines()


def test_repair_plan_from_a_findings_dataset(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from audit.findings import findings_table

    rows = [
        Finding("keyspace", "missing_on_replica", db=0, key=b"a").to_row("r", "p1", "redis"),
        Finding("keyspace", "extra_on_replica", db=0, key=b"b").to_row("r", "p2", "redis"),
        Finding("replication", "lagging").to_row("r", "p1", "redis"),
    ]
    (tmp_path / "findings.parquet").mkdir()
    pq.write_table(findings_table(rows), tmp_path / "findings.parquet" / "p.parquet")
    got = list(findings_rows(tmp_path / "findings.parquet", "p1"))
    assert got == [{"category": "missing_on_replica", "db": 0, "key": b"a"}]


# --- fleet snapshot layout ----------------------------------------------------------------------------------


def test_comparable_paths_leave_out_shards_a_side_could_not_read(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from audit.sources.redis.fleet_snapshot import FleetSnapshot, TaskResult
    from audit.sources.redis.snapshot import SNAPSHOT_SCHEMA

    results = []
    for side in ("master", "replica"):
        (tmp_path / side / "keys.parquet").mkdir(parents=True)
        for i in range(3):
            failed = side == "replica" and i == 1
            path = tmp_path / side / "keys.parquet" / f"shard-{i:03d}-h-{i}-part-00000.parquet"
            glob = path.with_name(f"shard-{i:03d}-h-{i}-part-*.parquet")  # a node's keys_file: its parts
            if not failed:
                row = {n: [None] for n in SNAPSHOT_SCHEMA.names} | {"db": [i], "key": [b"k%d" % i]}
                pq.write_table(pa.Table.from_pydict(row, schema=SNAPSHOT_SCHEMA), path)
            status, err = ("error", "unreachable") if failed else ("ok", None)
            results.append(
                TaskResult(side, i, f"s{i}", f"h:{i}", status, err, None if failed else str(glob), 1, 0, None)
            )
    whole = FleetSnapshot([r for r in results if r.ordinal != 1], {})  # every task read its shard
    assert whole.comparable_paths(tmp_path) == (
        str(tmp_path / "master/keys.parquet"),
        str(tmp_path / "replica/keys.parquet"),
    )
    m, r = FleetSnapshot(results, {}).comparable_paths(tmp_path)
    assert m.endswith("keys.parquet/{shard-000-h-0-part-*.parquet,shard-002-h-2-part-*.parquet}")
    for path in (m, r):
        assert sorted(x["db"] for x in spark.read.parquet(path).select("db").collect()) == [0, 2]


# --- a fleet side's snapshot.json: whole or not at all ---------------------------------------------------------
SIDE_META_CUT_SHORT = """
import resource, signal, sys
from pathlib import Path
from audit.sources.redis.fleet_snapshot import TaskResult, write_side_meta

results = [
    TaskResult("master", i, f"s{i}", f"n{i}", "ok", None, None, i, 0, {"started_at_ms": i, "ended_at_ms": i})
    for i in range(20)
]
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG), as on a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, (300, 300))
try:
    write_side_meta(Path(sys.argv[1]), results)
except Exception as e:
    print(type(e).__name__)
"""


def test_a_fleet_sides_snapshot_json_that_cannot_be_written_whole_leaves_the_earlier_one(tmp_path: Path) -> None:
    import json
    import os
    import subprocess
    import sys

    side = tmp_path / "master"
    side.mkdir()
    earlier = {"side": "master", "shards": [], "written_at_ms": 1}
    (side / "snapshot.json").write_text(json.dumps(earlier))
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(Path(__file__).parents[2])}
    done = subprocess.run(
        [sys.executable, "-c", SIDE_META_CUT_SHORT, str(side)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (side / "snapshot.json").read_text() == json.dumps(earlier)  # never half a file
    assert sorted(p.name for p in side.iterdir()) == ["snapshot.json"]  # nor a temporary one left
    assert done.stdout.strip() == "ConfigError"  # the output directory named, as for any file a run writes


# --- a migration's note on dbs -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "master, replica",
    [
        ("redis://old:6379", {"url": "redis://new:7000", "topology": "cluster"}),
        ({"url": "redis://old:7000", "topology": "cluster"}, "redis://new:6379"),
        ({"sentinels": ["s:26379"], "service": "m"}, "redis://new:6379"),
        ("redis://old:6379", {"sentinels": ["s:26379"], "service": "m"}),
    ],
)
def test_a_migration_note_suggests_setting_dbs_only_where_the_inventory_takes_them(
    master: object, replica: object
) -> None:
    # a standalone -> cluster migration's note said "set dbs to compare others": the inventory refuses any
    # db but 0 for that pair (exit 2), so an operator following the note was turned away
    import json

    from audit.inventory import parse_inventory
    from audit.sources.redis.fleet_keyspace_check import _migration_dbs_default

    def pair(**more: object) -> str:
        one = {"name": "m", "kind": "redis", "master": master, "replica": replica, "check_replication": False}
        return json.dumps({"pairs": [{**one, **more}]})

    said = _migration_dbs_default(parse_inventory(pair()).pairs[0])  # type: ignore[arg-type]
    try:
        parse_inventory(pair(dbs=[1]))
        takes_other_dbs = True
    except ConfigError:
        takes_other_dbs = False
    assert ("set dbs" in said) == takes_other_dbs, said
