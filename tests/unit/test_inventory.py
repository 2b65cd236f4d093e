from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from audit.errors import ConfigError
from audit.inventory import endpoint_url, env_conn_resolver, parse_inventory, redact_url
from audit.urls import url_secrets

GOOD = """
defaults: {max_keys_per_s: 500, recheck_rounds: 2, gate: {max_missing: 3}}
pairs:
  - name: cache-main
    kind: redis
    master: redis://auditor:s3cret@127.0.0.1:6379
    replica: redis://127.0.0.1:6380
    dbs: [2, 0, 2]
    gate: {max_value_mismatch: 5}
  - name: other
    kind: redis
    master: conn:redis_master
    replica: redis://127.0.0.1:6382
    max_keys_per_s: 50
"""


def test_defaults_merge_and_pair_overrides() -> None:
    inv = parse_inventory(GOOD)
    a, b = inv.pairs
    assert (a.settings.max_keys_per_s, a.settings.recheck_rounds, a.dbs) == (500, 2, [0, 2])
    assert (a.gate.max_missing, a.gate.max_value_mismatch, a.gate.max_type_mismatch) == (3, 5, 0)
    assert b.settings.max_keys_per_s == 50
    assert a.gate.category_limits()["missing_on_replica"] == 3
    assert len(inv.digest) == 64


MIXED = """
defaults: {gate: {max_lag_bytes: 100, max_lag_seconds: 5, max_missing: 2}}
pairs:
  - {name: cache, kind: redis, master: 'redis://h:1', replica: 'redis://h:2'}
  - {name: shop, kind: mysql, master: 'mysql://u@h:3306', replica: 'mysql://u@h2:3306'}
"""


def test_defaults_gate_gives_each_kind_only_the_thresholds_its_suite_reads() -> None:
    cache, shop = parse_inventory(MIXED).pairs
    assert cache.gate.model_fields_set == {"max_lag_bytes", "max_lag_seconds", "max_missing"}
    assert (cache.gate.max_lag_bytes, cache.gate.max_missing) == (100, 2)
    assert shop.gate.model_fields_set == {"max_lag_seconds"}


@pytest.mark.parametrize(
    ("kind", "key"), [("mysql", "max_lag_bytes"), ("mysql", "max_missing"), ("rocketmq", "max_lagging")]
)
def test_a_gate_key_the_pairs_kind_never_checks_is_refused(kind: str, key: str) -> None:
    ends = {
        "mysql": "master: 'mysql://u@h:1', replica: 'mysql://u@h:2'",
        "rocketmq": "master: {store_dir: /a}, replica: {store_dir: /b}",
    }[kind]
    with pytest.raises(
        ConfigError, match=rf"pairs\[0\] \(p\)\.gate\.{key}: kind {kind} is not gated on this \(its keys: "
    ):
        parse_inventory(f"pairs: [{{name: p, kind: {kind}, {ends}, gate: {{{key}: 1}}}}]")


def test_an_unreadable_suite_leaves_the_gate_keys_to_the_gate(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("REPLICA_AUDIT_EXPECTATIONS", str(tmp_path / "nowhere"))  # the gate names it when it runs
    (pair,) = parse_inventory(
        "pairs: [{name: p, kind: mysql, master: 'mysql://u@h:1', replica: 'mysql://u@h:2', gate: {max_lag_bytes: 1}}]"
    ).pairs
    assert pair.gate.max_lag_bytes == 1


R = "master: 'redis://h:1', replica: 'redis://h:2'"


@pytest.mark.parametrize(
    ("text", "names"),
    [
        (f"pairs: [{{name: a, kind: redis, {R}, gate: {{max_missing: lots}}}}]", "pairs[0] (a).gate.max_missing"),
        ("pairs: [{name: a, kind: memcached}]", "pairs[0] (a).kind"),
        (f"pairs: [{{name: a, kind: redis, {R}, mastr: x}}]", "pairs[0] (a).mastr"),
        (f"pairs: [{{name: a, kind: redis, {R}, dbs: [70000]}}]", "pairs[0] (a).dbs"),
        (f"pairs: [{{name: 'bad name!', kind: redis, {R}}}]", "pairs[0] (bad name!).name"),
        (f"defaults: {{qs: 1}}\npairs: [{{name: a, kind: redis, {R}}}]", "defaults.qs"),
        (f"pairs: [{{name: a, kind: redis, {R}}}, {{name: a, kind: redis, {R}}}]", "repeated: a"),
        ("pairs: [{name: a, kind: redis, replica: 'redis://h:2'}]", "pairs[0] (a).master: Field required"),
        (
            "pairs: [{name: a, kind: redis, master: 'http://h', replica: 'redis://h:2'}]",
            "pairs[0] (a).master: expected redis://host:port",
        ),
        (
            "pairs: [{name: a, kind: redis, master: 'redis:///0', replica: 'redis://h:2'}]",
            "pairs[0] (a).master: redis:///0: no host",
        ),
        (
            "pairs: [{name: a, kind: pika, master: 'redis://:pw@/0', replica: 'redis://h:2'}]",
            r"pairs[0] (a).master: redis://:***@/0: no host",
        ),
        (
            "pairs: [{name: a, kind: redis, master: {url: 'rediss://', topology: cluster}}]",
            "pairs[0] (a).master.url: rediss://: no host",
        ),
        (
            "pairs: [{name: a, kind: redis, master: 'unix://', replica: 'redis://h:2'}]",
            "pairs[0] (a).master: unix://: no socket path",
        ),
        (
            "pairs: [{name: a, kind: mysql, master: 'mysql:///shop', replica: 'mysql://u@h:2'}]",
            "pairs[0] (a).master: mysql:///shop: no host",
        ),
        (
            "pairs: [{name: a, kind: mysql, master: 'mysql://u@h:1', replica: 'mysql://h:2'}]",
            "pairs[0] (a).replica: mysql://h:2: no user",
        ),
        ("pairs: [{name: a, kind: pika, master: 'redis://h:1'}]", "give both servers"),
        ("pairs: [{name: a, kind: rocketmq, master: {store_dir: /x}, replica: {}}]", "pairs[0] (a).replica.store_dir"),
        (
            "pairs: [{name: a, kind: rocketmq, master: {store_dir: /x, qps: 1}, replica: {store_dir: /y}}]",
            "pairs[0] (a).master.qps",
        ),
        ("pairs: []", "pairs"),
        ("pairs: [", "not valid YAML"),
    ],
)
def test_malformed_inventory_names_the_field(text: str, names: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_inventory(text)
    assert names in str(e.value)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("pairs:\n  - name: p1\n    kind: redis\n   master: [x\n", "line 4, column 4: expected <block end>"),
        ('pairs: [{name: "p1}]', "line 1, column 21: found unexpected end of stream (while scanning a quoted scalar)"),
        ("pairs: [\t", "line 1"),
    ],
)
def test_yaml_that_does_not_parse_is_one_line_naming_where(text: str, said: str) -> None:
    # PyYAML's message is five lines (the source line, a caret) naming "<unicode string>"
    with pytest.raises(ConfigError) as e:
        parse_inventory(text, source="inv.yaml")
    assert str(e.value).startswith("inv.yaml: not valid YAML: ") and said in str(e.value)
    assert "\n" not in str(e.value) and "<unicode string>" not in str(e.value)


def test_passwords_never_shown() -> None:
    inv = parse_inventory(GOOD)
    assert "s3cret" not in repr(inv) and "s3cret" not in str(inv.model_dump())
    assert redact_url("redis://auditor:s3cret@h:1/0") == "redis://auditor:***@h:1/0"
    assert redact_url("redis://:s3cret@h:1") == "redis://:***@h:1"
    assert redact_url("mysql://u:s3cret@h:port/db") == "mysql://u:***@h:port/db"  # a typo in the port never crashes
    # a password typed with an unencoded "/", "?" or "#": urlsplit reads it as path, query or fragment
    for url in ("redis://:ab/s3cret@h:1", "mysql://u:ab?s3cret@h:3306/db", "redis://u:ab#s3cret@h"):
        assert "s3cret" not in redact_url(url) and ":***@h" in redact_url(url), url
    assert redact_url("redis://u:p@h:1/0?ssl_ca=/x&password=s3cret") == "redis://u:***@h:1/0"  # nor in a query
    # redis-py reads `?password=`: a URL without user info was shown whole, in the summary and the report
    assert redact_url("redis://h:1/0?ssl_ca=/x&password=s3cret") == "redis://h:1/0"
    assert {"s3cret", "s3 cret"} <= set(url_secrets("redis://h:1?a=b&password=s3cret x rediss://h?Password=s3%20cret"))


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("redis://:ab/s3cret@127.0.0.1:6379", "unencoded '/', '?' or '#'"),
        ("mysql://u:ab?s3cret@h:3306/db", "unencoded"),
        ("redis://127.0.0.1:abc", "port must be a number"),
        ("redis://127.0.0.1:99999", "port must be a number"),
        ("redis://:s3cret@h:x1", "port must be a number"),
    ],
)
def test_an_endpoint_that_would_not_parse_as_typed_is_a_config_error_without_its_secret(url: str, says: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(says)) as e:
        endpoint_url(url)
    assert "s3cret" not in str(e.value)


@pytest.mark.parametrize(
    ("query", "says"),
    [
        # `?foo=1` was a TypeError inside redis-py at the snapshot (exit 4, a traceback); a bad value was
        # "unreachable" (exit 3); a db that is no number was read as db 0
        ("/0?foo=1", "unknown URL option 'foo'"),
        ("/0?socket_timeout=soon", "Invalid value for 'socket_timeout'"),
        ("/zero", "the db in the path must be a number, got 'zero'"),
    ],
)
def test_a_redis_url_option_redis_py_would_not_take_is_refused_naming_the_field(query: str, says: str) -> None:
    text = f"pairs:\n  - {{name: c, kind: redis, master: 'redis://:s3cret@h:1{query}', replica: 'redis://h:2'}}\n"
    with pytest.raises(ConfigError, match=re.escape(says)) as e:
        parse_inventory(text)
    assert "pairs[0] (c).master: redis://:***@h:1" in str(e.value) and "s3cret" not in str(e.value)


def test_a_connection_port_that_is_not_a_number_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_REDIS_M", '{"conn_type": "redis", "host": "h", "port": "abc", "password": "x"}')
    with pytest.raises(ConfigError, match="conn:redis_m: port 'abc' is not a number"):
        env_conn_resolver("redis_m")
    assert redact_url("redis://h:1") == "redis://h:1"
    assert redact_url("sc://h:15002/;user_id=u;token=s3cret") == "sc://h:15002"  # Spark Connect's secret


def test_conn_reference_resolves_from_airflow_env(monkeypatch: pytest.MonkeyPatch) -> None:
    inv = parse_inventory(GOOD)
    with pytest.raises(ConfigError, match="AIRFLOW_CONN_REDIS_MASTER"):
        endpoint_url(inv.pairs[1].master)
    monkeypatch.setenv("AIRFLOW_CONN_REDIS_MASTER", "redis://:pw@10.1.1.1:6379/0")
    assert endpoint_url(inv.pairs[1].master) == "redis://:pw@10.1.1.1:6379/0"
    monkeypatch.setenv("AIRFLOW_CONN_REDIS_MASTER", '{"conn_type": "redis", "host": "h", "port": 7, "password": "p"}')
    assert env_conn_resolver("redis_master") == "redis://:p@h:7"
    assert endpoint_url(inv.pairs[1].master, resolver=lambda cid: f"redis://{cid}:1") == "redis://redis_master:1"


def test_environment_variables_are_expanded_and_a_missing_one_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    text = (
        "pairs: [{name: a, kind: redis, master: 'redis://auditor:${RA_PW}@h:1', replica: '${RA_REPLICA:-redis://h:2}'}]"
    )
    monkeypatch.setenv("RA_PW", "p%40ss%3Aw%2Frd")  # percent-encoded, as README asks
    pair = parse_inventory(text).pairs[0]
    assert endpoint_url(pair.master) == "redis://auditor:p%40ss%3Aw%2Frd@h:1"
    assert endpoint_url(pair.replica) == "redis://h:2"
    assert "p%40ss" not in pair.display_endpoint("master")
    monkeypatch.setenv("RA_PW", "p@ss:w/rd")  # not encoded: said when the inventory is read, without the password
    with pytest.raises(ConfigError, match=r"pairs\[0\] \(a\)\.master: .*percent-encode") as e:
        parse_inventory(text)
    assert "ss" not in str(e.value).replace("password", "")
    monkeypatch.delenv("RA_PW")
    with pytest.raises(ConfigError, match=r"inventory: pairs\[0\] \(a\)\.master: \$\{RA_PW\} is not set"):
        parse_inventory(text)


def test_json_connection_with_reserved_characters_and_ssl(monkeypatch: pytest.MonkeyPatch) -> None:
    from urllib.parse import unquote, urlsplit

    conn = json.dumps(
        {"conn_type": "redis", "host": "h", "port": 7, "login": "a:b", "password": "p@ss:w/rd", "extra": {"ssl": True}}
    )
    monkeypatch.setenv("AIRFLOW_CONN_CACHE", conn)
    url = env_conn_resolver("cache")
    parts = urlsplit(url)
    assert parts.scheme == "rediss" and parts.hostname == "h" and parts.port == 7
    assert unquote(parts.username or "") == "a:b" and unquote(parts.password or "") == "p@ss:w/rd"
    assert "p@ss" not in redact_url(url)
    monkeypatch.setenv("AIRFLOW_CONN_DB", '{"conn_type": "mysql", "host": "::1", "login": "u", "password": "x"}')
    assert env_conn_resolver("db") == "mysql://u:x@[::1]:3306"


def test_the_deprecated_qps_is_still_read_as_a_keys_per_second_cap(caplog: pytest.LogCaptureFixture) -> None:
    text = "pairs: [{name: a, kind: redis, master: 'redis://h:1', replica: 'redis://h:2', qps: 20000}]"
    settings = parse_inventory(text).pairs[0].settings
    assert settings.qps == 20000 and settings.max_keys_per_s is None
    assert settings.snapshot_options().pace_settings().max_keys_per_s == 5000  # qps counted ~4 commands a key
    assert "setting `qps` is deprecated" in caplog.text and "max_keys_per_s=5000" in caplog.text


PAIR = "name: a, kind: redis, master: 'redis://h:1', replica: 'redis://h:2'"


@pytest.mark.parametrize(
    ("text", "named"),
    [
        (
            "pairs: [{name: a, kind: redis, master: 'redis://h:1', replica: 'redis://h:2', settings: [1]}]",
            "pairs[0] (a).settings",
        ),
        (
            "pairs: [{name: a, kind: redis, master: 'redis://h:1', replica: 'redis://h:2', settings: abc}]",
            "pairs[0] (a).settings",
        ),
        (
            "defaults: {gate: [1]}\npairs: [{name: a, kind: redis, master: 'redis://h:1', replica: 'redis://h:2'}]",
            "defaults.gate",
        ),
        ("defaults: [1]\npairs: [{name: a, kind: redis, master: 'redis://h:1', replica: 'redis://h:2'}]", "defaults"),
    ],
)
def test_settings_that_are_not_a_mapping_are_named(text: str, named: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(named) + ": expected a mapping"):
        parse_inventory(text)


def test_an_inventory_that_is_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    from audit.inventory import load_inventory

    path = tmp_path / "latin.yaml"
    path.write_bytes(b"pairs:\n  - name: caf\xe9\n    kind: redis\n")
    with pytest.raises(ConfigError, match="not UTF-8 text"):
        load_inventory(path)


def test_a_pair_named_twice_is_audited_once() -> None:
    inv = parse_inventory(GOOD)
    name = inv.pairs[0].name
    assert [p.name for p in inv.select([name, name])] == [name]


def test_a_tls_file_is_looked_for_where_the_pair_connects_not_where_the_inventory_is_read() -> None:
    text = (
        "pairs: [{name: db, kind: mysql, master: 'mysql://a:pw@h:3306?ssl_ca=/on/the/workers/ca.pem',"
        " replica: 'mysql://a:pw@h2:3306'}, {name: c, kind: redis, master: 'redis://h:1', replica: 'redis://h:2'}]"
    )
    assert [p.name for p in parse_inventory(text).pairs] == ["db", "c"]  # the scheduler may lack the file


def test_a_rocketmq_side_naming_a_server_connection_is_refused_without_its_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_CACHE", "redis://:s3cretpw@10.0.0.5:6379")
    (pair,) = parse_inventory("pairs: [{name: mq, kind: rocketmq, master: conn:cache, replica: {store_dir: /s}}]").pairs
    with pytest.raises(ConfigError, match="master: conn:cache is a server connection") as e:
        pair.store("master")  # type: ignore[attr-defined]
    assert "s3cretpw" not in str(e.value)


DOCUMENTED = [Path(__file__).parents[2] / "README.md", *sorted((Path(__file__).parents[2] / "docs").glob("*.md"))]


@pytest.mark.parametrize("doc", DOCUMENTED, ids=lambda p: p.name)
def test_every_inventory_the_docs_show_is_one_the_product_reads(doc: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `master: {url: redis://auditor:${PW}@h:7000, ...}` was shown, which YAML cannot read (the `{` of ${PW}
    # inside a flow mapping): a user copying it got "not valid YAML"
    for name in ("REDIS_PASSWORD", "MYSQL_PASSWORD", "PASSWORD", "PW"):
        monkeypatch.setenv(name, "secret")
    for block in re.findall(r"```yaml\n(.*?)```", doc.read_text(), re.S):
        if not re.search(r"^\s*(- )?name: .*\n\s*kind: ", block, re.M):
            continue  # not an inventory (a signature of docs/incidents.md)
        text = block if block.lstrip().startswith(("pairs:", "defaults:")) else "pairs:\n" + block
        assert parse_inventory(text, source=doc.name).pairs
