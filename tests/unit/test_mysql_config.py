"""Kind mysql's configuration: endpoints, settings and table patterns; every error names its field."""

from __future__ import annotations

import pytest

from audit.errors import ConfigError
from audit.sources.mysql.catalog import align_names, select_tables
from audit.sources.mysql.endpoint import MySQLEndpoint, MySQLSettings, parse_tables


def test_endpoint_from_url_keeps_the_password_secret(tmp_path) -> None:  # type: ignore[no-untyped-def]
    ca = tmp_path / "ca.pem"
    ca.write_text("")
    ep = MySQLEndpoint.from_url(f"mysql://auditor:S3cr%40t@10.0.0.9:3307?connect_timeout=2&ssl_ca={ca}", "master")
    assert (ep.host, ep.port, ep.user, ep.connect_timeout_s, ep.ssl_ca) == ("10.0.0.9", 3307, "auditor", 2.0, str(ca))
    assert ep.password.get_secret_value() == "S3cr@t" and ep.where == "10.0.0.9:3307"
    assert "S3cr" not in repr(ep) and "S3cr" not in ep.shown
    assert MySQLEndpoint.from_url("mariadb://a@h").port == 3306


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis://a:b@h:1", "master: redis://a:\\*\\*\\*@h:1: scheme must be mysql://"),
        ("mysql://h:3306", "master: mysql://h:3306: no user"),
        ("mysql://a:pw@h:notaport", "bad host or port"),
        ("mysql://a:pw@h:3306?timeout=3", "unknown option 'timeout'"),
        ("mysql://a:pw@h:3306?connect_timeout=-1", "connect_timeout=-1: expected seconds above 0"),
        ("mysql://a:pw@h:3306?connect_timeout=abc", "connect_timeout=abc: expected seconds above 0"),
        ("mysql://a:pw@h:3306?ssl_ca=/nonexistent/ca.pem", "ssl_ca=/nonexistent/ca.pem: no such readable file"),
    ],
)
def test_bad_endpoints_name_the_field_never_the_password(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as e:
        MySQLEndpoint.from_url(url, "master")
    assert ":pw@" not in str(e.value)


def test_settings_errors_name_the_field() -> None:
    assert MySQLSettings.from_mapping(None).chunk_time_s > 0
    assert MySQLSettings.from_mapping({"gtid_wait_s": 3}).gtid_wait_s == 3
    with pytest.raises(ConfigError, match=r"pairs\[0\].settings.chunk_time_s: Input should be greater than 0"):
        MySQLSettings.from_mapping({"chunk_time_s": 0}, "pairs[0].settings")
    with pytest.raises(ConfigError, match=r"settings.chunk_rows: Extra inputs are not permitted"):
        MySQLSettings.from_mapping({"chunk_rows": 5})
    with pytest.raises(ConfigError, match=r"settings.hash_function: Input should be 'crc32' or 'md5'"):
        MySQLSettings.from_mapping({"hash_function": "sha1"})
    with pytest.raises(ConfigError, match=r"s.min_chunk_rows: 60000 is above s.max_chunk_rows \(50000\)"):
        MySQLSettings.from_mapping({"min_chunk_rows": 60_000}, "s")
    assert MySQLSettings.from_mapping({"min_chunk_rows": 9, "max_chunk_rows": 9}).max_chunk_rows == 9


def test_table_patterns() -> None:
    orders, shop_all, quoted = parse_tables(["shop.orders", "shop.*", "`a.b`.`t*`"])
    assert orders.matches("shop", "orders") and not orders.matches("shop", "orders2") and not orders.is_glob
    assert shop_all.is_glob and shop_all.matches("shop", "x") and not shop_all.matches("shop2", "x")
    assert (quoted.schema, quoted.table, quoted.is_glob) == ("a.b", "t*", False)
    assert quoted.matches("a.b", "t*") and not quoted.matches("a.b", "tx")
    with pytest.raises(ConfigError, match=r"tables\[1\]: 'orders' is not schema.table"):
        parse_tables(["shop.orders", "orders"])


def test_table_selection_names_what_does_not_exist() -> None:
    master = [("shop", "orders"), ("shop", "items")]
    replica = [("shop", "orders"), ("shop", "audit")]
    assert select_tables((), master, replica) == [("shop", "audit"), ("shop", "items"), ("shop", "orders")]
    assert select_tables(parse_tables(["shop.orders", "shop.*"]), master, replica)[0] == ("shop", "orders")
    with pytest.raises(
        ConfigError,
        match=r"tables\[0\]: shop.nope does not exist \(or is not visible to the auditor\) on the master",
    ):
        select_tables(parse_tables(["shop.nope"]), master, replica)
    with pytest.raises(ConfigError, match=r"tables\[0\]: crm.\* matches no table"):
        select_tables(parse_tables(["crm.*"]), master, replica)


def test_a_side_with_lower_case_table_names_takes_the_other_sides_spelling() -> None:
    master = {("Shop", "Orders"): 10, ("Shop", "Only"): 1}
    folded = {("shop", "orders"): 10, ("shop", "extra"): 2}
    assert align_names(master, folded, (False, False)) == (master, folded, {}, {})
    m, r, m_own, r_own = align_names(master, folded, (False, True))
    assert (m, m_own) == (master, {})
    assert r == {("Shop", "Orders"): 10, ("shop", "extra"): 2}
    assert r_own == {("Shop", "Orders"): ("shop", "orders")}
    # the master folds: its names take the case-sensitive replica's spelling
    m, r, m_own, r_own = align_names(folded, master, (True, False))
    assert m == {("Shop", "Orders"): 10, ("shop", "extra"): 2} and m_own == {("Shop", "Orders"): ("shop", "orders")}
    assert (r, r_own) == (master, {})
    assert select_tables(parse_tables(["shop.orders"]), m, r, fold=True) == [("Shop", "Orders")]
    with pytest.raises(ConfigError, match=r"shop\.orders does not exist"):
        select_tables(parse_tables(["shop.orders"]), m, r)


def test_a_tls_file_that_is_no_certificate_is_a_config_error_naming_the_options(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # pymysql builds its TLS context before it connects: the ssl.SSLError was an internal error (exit 4)
    from audit.sources.mysql.client import connect

    ca = tmp_path / "ca.pem"
    ca.write_text("not a certificate")
    ep = MySQLEndpoint.from_url(f"mysql://auditor:pw@127.0.0.1:1?ssl_ca={ca}&connect_timeout=1", "master")
    with pytest.raises(ConfigError, match=r"master mysql://auditor:\*\*\*@127\.0\.0\.1:1.*: the TLS options"):
        connect(ep, "master")
