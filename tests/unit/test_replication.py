"""Replication-state detectors on INFO text captured from real servers."""

from __future__ import annotations

from audit.diagnose import catalog, diagnose
from audit.sources.redis.info import parse_client_list, parse_info, replicas_listed
from audit.sources.redis.replication import (
    SAMPLE_GAP_S,
    UNACKED_GAP_S,
    Sample,
    replication_findings,
    second_sample_gap_s,
    wrong_master,
)

MASTER = """# Replication\r
role:master\r
connected_slaves:2\r
slave0:ip=127.0.0.1,port=17002,state=online,offset=275,lag=0\r
slave1:ip=127.0.0.1,port=0,state=online,offset=0,lag={lag}\r
master_failover_state:no-failover\r
master_replid:8265ae3109543e3017391f51e9e8b922a8ec20ce\r
master_repl_offset:{offset}\r
"""
REPLICA = """# Replication\r
role:slave\r
master_host:127.0.0.1\r
master_port:17001\r
master_link_status:{link}\r
master_last_io_seconds_ago:1\r
slave_repl_offset:{offset}\r
master_replid:8265ae3109543e3017391f51e9e8b922a8ec20ce\r
"""
CLIENTS = (
    "id=5 addr=127.0.0.1:50100 laddr=127.0.0.1:17001 fd=9 name= age=20 idle=0 flags=S db=0 cmd=replconf\n"
    "id=6 addr=127.0.0.1:50102 laddr=127.0.0.1:17001 fd=10 name= age=16 idle=16 flags=S db=0 cmd=sync\n"
)


def sample(at_ms: int, lag: int = 0, m_off: int = 275, r_off: int = 275, link: str = "up") -> Sample:
    return Sample(
        at_ms,
        parse_info(MASTER.format(lag=lag, offset=m_off)),
        parse_info(REPLICA.format(link=link, offset=r_off)),
        CLIENTS,
    )


def test_parses_slave_lines_and_client_list() -> None:
    entries = replicas_listed(parse_info(MASTER.format(lag=4, offset=1)))
    assert [(e["port"], e["offset"], e["lag"]) for e in entries] == [(17002, 275, 0), (0, 0, 4)]
    assert [c["cmd"] for c in parse_client_list(CLIENTS)] == ["replconf", "sync"]


def test_sync_replica_is_diagnosed_redis_sync_no_ack() -> None:
    found = replication_findings([sample(0, lag=4), sample(6000, lag=10)], 17002, 10 << 20, 30)
    assert [f.category for f in found] == ["lag_metric_unreliable"]
    assert found[0].evidence["lag_growing"] is True and found[0].evidence["client_cmd"] == "sync"
    [diagnosed] = diagnose("redis", found)
    assert diagnosed.diagnosis == "REDIS_SYNC_NO_ACK"
    assert any(s.code == "REDIS_SYNC_NO_ACK" for s in catalog())


def test_a_sync_replica_that_announced_its_port_is_diagnosed_too() -> None:
    """A real replica falling back to SYNC sent REPLCONF listening-port first: its real port, offset=0."""

    def announced(at_ms: int, lag: int) -> Sample:
        master = MASTER.replace("port=0,state=online,offset=0", "port=7777,state=online,offset=0")
        return Sample(
            at_ms,
            parse_info(master.format(lag=lag, offset=275)),
            parse_info(REPLICA.format(link="up", offset=275)),
            CLIENTS,
        )

    found = replication_findings([announced(0, 4), announced(6000, 10)], 17002, 10 << 20, 30)
    [diagnosed] = diagnose("redis", found)
    assert diagnosed.diagnosis == "REDIS_SYNC_NO_ACK" and diagnosed.evidence["slave_port"] == 7777
    # a replica that has only just attached (offset=0 before its first ack, lag not growing, no SYNC) is not
    fresh = [Sample(0, s.master, s.replica, "") for s in (announced(0, 0), announced(6000, 0))]
    assert [f.diagnosis for f in diagnose("redis", replication_findings(fresh, 17002, 10 << 20, 30))] == [None]


def test_a_master_with_nothing_written_has_nothing_to_acknowledge() -> None:
    """A fresh, idle pair: the master's offset is 0, so a replica's offset=0 is exact, not unreliable."""
    idle = [sample(0, m_off=0, r_off=0), sample(2000, m_off=0, r_off=0)]
    assert replication_findings(idle, 17002, 10 << 20, 30) == []
    written = [sample(0, m_off=14, r_off=14), sample(2000, m_off=14, r_off=14)]
    assert [f.category for f in replication_findings(written, 17002, 10 << 20, 30)] == ["lag_metric_unreliable"]


def test_healthy_pair_gives_no_state_findings() -> None:
    healthy = MASTER.replace("slave1:ip=127.0.0.1,port=0,state=online,offset=0,lag={lag}\r\n", "")
    s1 = Sample(0, parse_info(healthy.format(offset=275)), parse_info(REPLICA.format(link="up", offset=275)))
    s2 = Sample(2000, parse_info(healthy.format(offset=300)), parse_info(REPLICA.format(link="up", offset=290)))
    assert replication_findings([s1, s2], 17002, 10 << 20, 30) == []


def test_link_down_lagging_and_replica_ahead() -> None:
    down = replication_findings([sample(0, link="down")], 17002, None, None)
    assert next(f.category for f in down) == "link_down"
    lagging = replication_findings([sample(0, m_off=50_000, r_off=100)], 17002, 1000, None)
    assert "lagging" in [f.category for f in lagging]
    assert next(f for f in lagging if f.category == "lagging").evidence["lag_bytes"] == 49_900
    ahead = replication_findings([sample(0, m_off=100, r_off=500)], 17002, 1000, None)
    assert next(f for f in ahead if f.category == "replica_ahead").bytes == 400


def test_wrong_master() -> None:
    m = parse_info(MASTER.format(lag=0, offset=1))
    r = parse_info(REPLICA.format(link="up", offset=1))
    assert wrong_master(m, r, "127.0.0.1", 17001) is None
    other = dict(r, master_port="17999", master_replid="ffff")
    found = wrong_master(m, other, "127.0.0.1", 17001)
    assert found is not None and found.evidence["follows"] == "127.0.0.1:17999"
    assert wrong_master(m, dict(r, role="master"), "127.0.0.1", 17001) is not None


def test_offsets_for_the_report_come_from_both_sides_samples() -> None:
    from audit.sources.redis.replication_check import offsets_of

    samples = [
        Sample(at_ms=1000, master={"master_repl_offset": "500"}, replica={"slave_repl_offset": "480"}),
        Sample(at_ms=2100, master={"master_repl_offset": "700"}, replica={"slave_repl_offset": "700"}),
        Sample(at_ms=2200, master={"role": "master"}, replica={"role": "slave"}),  # nothing to plot: dropped
    ]
    offsets = offsets_of(samples)
    assert offsets.samples == [(1000, 500.0, 480.0), (2100, 700.0, 700.0)]
    assert offsets.last == (700.0, 700.0)


def test_the_second_sample_waits_longer_when_the_first_lists_a_replica_with_no_ack() -> None:
    """`lag` is whole seconds of a cached clock: 1.1 s apart, a lag that only grows could read 4 twice
    (a CI run saw exactly that: no diagnosis). Only an unacked entry after a write pays the longer wait."""
    assert second_sample_gap_s([sample(0, lag=4)]) == UNACKED_GAP_S >= 3
    acked = MASTER.replace("port=0,state=online,offset=0", "port=0,state=online,offset=275")
    healthy = Sample(0, parse_info(acked.format(lag=0, offset=275)), parse_info(REPLICA.format(link="up", offset=275)))
    nothing_written = sample(0, lag=4, m_off=0)
    assert second_sample_gap_s([healthy, nothing_written]) == SAMPLE_GAP_S < UNACKED_GAP_S
    assert second_sample_gap_s([healthy, sample(0)]) == UNACKED_GAP_S
