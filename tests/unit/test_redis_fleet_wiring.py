"""The redis kind's fleet wiring without servers: pair shapes, the checks composed for each, the topology
kept in the state without secrets, the ASK pipe's re-packing, a shard master's ASK read as absence,
key-filter counts, the compare mode in the diff and the recheck, detail.fields spliced into findings."""

from __future__ import annotations

import json

import pytest

from audit.errors import ConfigError
from audit.inventory import parse_inventory
from audit.kernel.kind import kind_spec
from audit.sources.redis.divergence import filter_note, with_fields, with_fields_table
from audit.sources.redis.fleet_state import topology_from_json, topology_json
from audit.sources.redis.keys import KeyState
from audit.sources.redis.recheck import category_of
from audit.sources.redis.resp import pack
from audit.sources.redis.routing import _absent_if_asked, served_slots, split_packed
from audit.sources.redis.scan_filter import filtered_by_match
from audit.sources.redis.topology import Node, Shard, SlotMove, Topology

CLUSTER = "{url: 'redis://u:pw@10.0.0.5:7000', topology: cluster}"
SENTINEL = "{sentinels: ['10.0.0.1:26379'], service: mymaster, password: pw}"


def pair(fields: str):  # type: ignore[no-untyped-def]
    return parse_inventory(f"pairs: [{{name: p, kind: redis, {fields}}}]").pairs[0]


@pytest.mark.parametrize(
    ("fields", "names"),
    [
        ("master: 'redis://a:1'", "pairs[0] (p): replica: give the replica's URL"),
        (f"master: {CLUSTER}, replica: 'redis://b:1'", "check_replication: a cluster master with a standalone"),
        (f"master: {CLUSTER}, dbs: [1]", "dbs: a cluster has db 0 only"),
        # a migration's db 3 was compared with the cluster's db 0: every key missing on one side, extra on the other
        (
            f"master: 'redis://a:1', replica: {CLUSTER}, check_replication: false, dbs: [3]",
            "dbs: a cluster has db 0 only, so a migration between it and a standalone side compares db 0",
        ),
        (f"master: {SENTINEL}, replica: {CLUSTER}, check_replication: false, dbs: [0, 1]", "and a sentinel side"),
        (f"master: {CLUSTER}, compare: fast", "pairs[0] (p).compare: Input should be 'full', 'length' or 'keys'"),
        ("master: {url: 'redis://a:1', topology: ring}", "pairs[0] (p).master.topology"),
        ("master: {sentinels: [], service: m}", "pairs[0] (p).master.sentinels"),
        (f"master: {CLUSTER}, keys: {{include: 'user:*'}}", "pairs[0] (p).keys.include"),
        (f"master: {CLUSTER}, show_values: maybe", "pairs[0] (p).show_values"),
    ],
)
def test_bad_fleet_pairs_name_the_field(fields: str, names: str) -> None:
    with pytest.raises(ConfigError, match=".*".join(map(_escape, names.split("*")))):
        pair(fields)


def _escape(text: str) -> str:
    import re

    return re.escape(text)


def test_each_shape_gets_its_checks() -> None:
    checks = kind_spec("redis").checks
    names = {
        "standalone": [c.name for c in checks(pair("master: 'redis://a:1', replica: 'redis://b:1'"))],
        "standalone form": [
            c.name for c in checks(pair("master: {url: 'redis://a:1', topology: standalone}, replica: 'redis://b:1'"))
        ],
        "cluster": [c.name for c in checks(pair(f"master: {CLUSTER}"))],
        "sentinel": [c.name for c in checks(pair(f"master: {SENTINEL}"))],
        "migration": [
            c.name for c in checks(pair(f"master: 'redis://a:1', replica: {CLUSTER}, check_replication: false"))
        ],
    }
    assert names == {
        "standalone": ["replication", "keyspace"],
        "standalone form": ["replication", "keyspace"],
        "cluster": ["topology", "replication", "keyspace"],
        "sentinel": ["topology", "replication", "keyspace"],
        "migration": ["topology", "keyspace"],
    }
    shown = pair(f"master: {CLUSTER}").display_endpoint("master") + pair(f"master: {SENTINEL}").display_endpoint(
        "master"
    )
    assert "pw" not in shown and "(cluster)" in shown and "service mymaster" in shown


def test_topology_kept_without_urls_and_rebuilt() -> None:
    a = Node("10.0.0.5", 7000, "redis://u:pw@10.0.0.5:7000", "id-a", "online")
    b = Node("10.0.0.6", 7001, "redis://u:pw@10.0.0.6:7001", "id-b", "online")
    topo = Topology(
        "cluster",
        "redis://u:***@10.0.0.5:7000",
        (Shard(a, (b,), ((0, 16383),)),),
        source="CLUSTER SHARDS",
        cluster_state="ok",
        moves=(SlotMove(5, "migrating", a.addr, b.addr),),
        unreachable={"10.0.0.7:7002": "down"},
    )
    kept = json.dumps(topology_json(topo))
    assert "pw" not in kept
    back = topology_from_json(json.loads(kept), lambda h, p: f"redis://u:pw@{h}:{p}")
    assert back == topo


def test_ask_pipe_splits_packed_commands_back() -> None:
    commands = [[b"TYPE", b"a b"], [b"PTTL", b"\x00\r\n"], [b"HSCAN", b"k", b"0", b"COUNT", b"10"]]
    assert split_packed(pack(commands)) == commands


def test_a_shard_masters_ask_reads_as_absent_and_its_slot_as_served() -> None:
    """Redis answers ASK only from the node migrating the key's slot, for a key it does not hold: in a
    replication audit that is the key's absence on the master (and the snapshot counts no such row as
    left out). MOVED (the slot gone) and any other error stay errors; a replica's ASK is not taken."""
    import pyarrow as pa

    from audit.sources.redis.fleet_snapshot import SnapshotTask, _left_out, _redirected

    def state(status: str, error: str | None) -> KeyState:
        return KeyState(b"k", "", None, None, 0, None, status, error, 5)

    assert _absent_if_asked(state("error", "ASK 3999 10.0.0.6:7001")) == state("vanished", None)
    for kept in (state("error", "MOVED 3999 10.0.0.6:7001"), state("error", "CLUSTERDOWN x"), state("ok", None)):
        assert _absent_if_asked(kept) == kept
    me = "a" * 40
    text = f"{me} 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-9 [5->-{'b' * 40}]\n"
    assert served_slots(text) == set(range(10))  # the migrating slot 5 included
    assert served_slots(text.replace("myself,master", "myself,slave")) is None
    rows = pa.table({"status": ["error", "error", "ok"], "error": ["ASK 5 h:1", "MOVED 5 h:1", None]})
    master = SnapshotTask("master", 0, "s", "n", "redis://n", cluster=True)
    replica = SnapshotTask("replica", 0, "s", "r", "redis://r", readonly=True, cluster=True)
    redirected = _redirected(rows)
    assert _left_out(rows, redirected, master, 0).to_pylist() == [False, True, False]
    assert _left_out(rows, redirected, replica, 0).to_pylist() == [True, True, False]
    assert _left_out(rows, redirected, master, None).to_pylist() == [True, True, False]  # a migration re-reads


def test_scan_match_count_is_the_servers_count_minus_the_keys_scanned() -> None:
    info = {"db0": {"keys": "100", "expires": "0"}, "db3": {"keys": 7}}
    assert filtered_by_match(info, [0, 3, 5], {0: 40, 3: 9}) == 60  # db3: never below 0
    note = filter_note({"include": ["user:*"], "exclude": []}, {"master": 60, "replica": 58}, "user:*")
    assert note.startswith("keys filter include ['user:*']: 60 on the master, 58 on the replica left out")
    assert "an estimate" in note


def _state(type_: str, length: int, digest: str, expire: int | None = None) -> KeyState:
    return KeyState(b"k", type_, None, expire, length, digest, "ok", None, 0)


@pytest.mark.parametrize(
    ("master", "replica", "full", "length", "keys"),
    [
        (_state("string", 3, "a"), _state("string", 3, "b"), "value_mismatch", None, None),
        (_state("string", 3, "a"), _state("string", 4, "b"), "value_mismatch", "value_mismatch", None),
        (_state("string", 3, "a"), _state("hash", 3, "a"), "type_mismatch", "type_mismatch", None),
        (_state("string", 3, "a", 10_000), _state("string", 3, "a"), "ttl_mismatch", "ttl_mismatch", None),
        # value and TTL both differ: `length` ignores the value (same count), not the TTL it compares
        (_state("string", 3, "a", 10_000), _state("string", 3, "b"), "value_mismatch", "ttl_mismatch", None),
        (_state("string", 3, "a"), None, "missing_on_replica", "missing_on_replica", "missing_on_replica"),
    ],
)
def test_recheck_applies_the_compare_mode(
    master: KeyState, replica: KeyState | None, full: str | None, length: str | None, keys: str | None
) -> None:
    got = [category_of(master, replica, 2000, mode) for mode in ("full", "length", "keys")]
    assert got == [full, length, keys]


def test_diff_applies_the_compare_mode(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import pyarrow as pa
    import pyarrow.parquet as pq

    from audit.diff.keyspace import diff_snapshots
    from audit.sources.redis.snapshot import SNAPSHOT_SCHEMA

    def side(rows: list[tuple[bytes, str, int, str, int | None]], name: str) -> str:
        cols = {n: [] for n in SNAPSHOT_SCHEMA.names}  # type: ignore[var-annotated]
        for key, type_, length, digest, expire in rows:
            for n, v in zip(
                SNAPSHOT_SCHEMA.names,
                (0, key, type_, None, expire, length, digest, "ok", None, 1000),
                strict=True,
            ):
                cols[n].append(v)
        path = tmp_path / f"{name}.parquet"
        pq.write_table(pa.Table.from_pydict(cols, schema=SNAPSHOT_SCHEMA), path)
        return str(path)

    m = side(
        [
            (b"same-len", "string", 3, "a", None),
            (b"longer", "string", 3, "a", None),
            (b"ttl", "string", 1, "x", 9_000_000_000),
        ],
        "m",
    )
    r = side(
        [(b"same-len", "string", 3, "b", None), (b"longer", "string", 4, "b", None), (b"ttl", "string", 1, "x", None)],
        "r",
    )
    counts = {
        mode: diff_snapshots(spark, m, r, str(tmp_path / mode), 2000, mode)["candidates"]
        for mode in ("full", "length", "keys")
    }
    assert counts == {"full": 3, "length": 2, "keys": 0}


@pytest.mark.parametrize("where", ["spark", "arrow"])
def test_fields_spliced_into_the_findings_detail(spark, where: str) -> None:  # type: ignore[no-untyped-def]
    # the same splice on a Spark frame and on findings already in the driver (an Arrow table)
    findings = spark.createDataFrame(
        [(0, b"k", '{"master":{"type":"hash"}}'), (1, b"k", '{"b":2}'), (0, b"other", '{"a":1}'), (0, b"none", None)],
        "db int, key binary, detail string",
    )
    evidence = [(0, b"k", '{"total":1,"items":[{"field":"\\"f\\""}]}'), (0, b"none", '{"total":0}')]
    if where == "spark":
        out = [r.asDict() for r in with_fields(findings, evidence).collect()]
    else:
        out = with_fields_table(findings.toArrow(), evidence).to_pylist()
    details = {(r["db"], bytes(r["key"])): r["detail"] and json.loads(r["detail"]) for r in out}
    assert details[(0, b"k")] == {"master": {"type": "hash"}, "fields": {"total": 1, "items": [{"field": '"f"'}]}}
    assert details[(1, b"k")] == {"b": 2}  # the same key in another db has no evidence
    assert details[(0, b"other")] == {"a": 1} and details[(0, b"none")] is None
