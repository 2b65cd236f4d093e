"""RocketMQ HA state: log and mqadmin parsers, the ack decoding, and the negative-lag findings of the broker log
behind docs/incidents.md (RMQ_FOREIGN_HA_CLIENT), read as test data from tests/fixtures/rocketmq-incident/."""

from __future__ import annotations

from typing import Any

import pytest

from audit.diagnose import Signature, diagnose, parse_catalog
from audit.findings import Finding
from audit.sources.rocketmq.ha import (
    IMPLAUSIBLE_OFFSET,
    decode_ascii_offset,
    ha_findings,
    max_offset_from_status,
    offset_bytes,
    parse_broker_log,
    parse_broker_status,
    parse_ha_status,
    replica_ahead_finding,
    smallest_printable_at_least,
)
from tests.conftest import FIXTURES

# Proposed catalog entries (to be added to audit/signatures.yaml, in this order: the foreign client first,
# since an impossible ack explains a negative lag whatever state the slave's files are in).
PROPOSED_SIGNATURES = """
- code: RMQ_FOREIGN_HA_CLIENT
  kinds: [rocketmq]
  categories: [negative_lag]
  any: {ack_is_ascii: true, ack_implausible: true}
  meaning: >-
    The master's push2SlaveMaxOffset holds an ack that no store can have written: its 8 big-endian bytes
    read as text (telnet sending "99999999" gives 4123389851770370361), or it lies beyond 2^56 bytes.
    Some program that is not a slave wrote to the HA port, which has no authentication. The lag figure is
    meaningless until the master restarts, and a SYNC_MASTER acks writes no slave has.
  source: docs/incidents.md#rmq_foreign_ha_client
- code: RMQ_STALE_SLAVE
  kinds: [rocketmq]
  categories: [negative_lag, replica_ahead, stale_replica_data]
  any: {replica_ahead: true, other_master: true}
  meaning: >-
    A slave that kept an old master's commit log reattached to a redeployed master: it acks its old max
    offset, beyond the new master's end, and the overlap holds the old master's records (another store
    host or older timestamps) while the new master's records there were never copied. Deploy a fresh
    slave and restart the master (push2SlaveMaxOffset only resets on restart).
  source: docs/incidents.md#rmq_stale_slave
"""


def proposed() -> tuple[Signature, ...]:
    return parse_catalog(PROPOSED_SIGNATURES)


def diagnosed(findings: list[Finding]) -> list[tuple[str, str | None]]:
    return [(f.category, f.diagnosis) for f in diagnose("rocketmq", findings, proposed())]


@pytest.fixture(scope="module")
def incident_log() -> list[str]:
    return (FIXTURES / "rocketmq-incident" / "broker.log").read_text().splitlines()


def test_ascii_acks_decode_and_real_offsets_do_not() -> None:
    assert decode_ascii_offset(4123389851770370361) == "99999999"
    assert int.from_bytes(b"99999999", "big") == 4123389851770370361
    assert decode_ascii_offset(27539373) is None and decode_ascii_offset(0) is None
    assert decode_ascii_offset(-1) is None and offset_bytes(-1) == b"\xff" * 8
    assert decode_ascii_offset(int.from_bytes(b"GET / HT", "big")) == "GET / HT"
    assert decode_ascii_offset(int.from_bytes(b"abc\r\n\x00\x00\x00", "big")) is None


def test_foreign_client_numbers_come_out_of_the_incident_log(incident_log: list[str]) -> None:
    log = parse_broker_log(incident_log)
    (request,) = log.requests
    assert (request.client, request.offset) == ("/127.0.0.2:38824", 4123389851770370361)
    episodes = ha_findings(master_max=None, replica_max=None, log=log)
    telnet = next(f for f in episodes if f.evidence["last_seen"] == "2019-12-04 11:35:53")
    ev = telnet.evidence
    # The logged figure is exactly master max minus the ack that "99999999" makes.
    assert ev["master_max_offset"] - ev["ack_offset"] == ev["lag_bytes"] == -4123389851742830988
    assert (ev["master_max_offset"], ev["ack_ascii"], ev["client"]) == (27539373, "99999999", "/127.0.0.2:38824")
    assert ev["ack_is_ascii"] and ev["ack_implausible"]
    assert (telnet.start_num, telnet.end_num, telnet.bytes) == (27539373, 4123389851770370361, 4123389851742830988)
    assert diagnosed([telnet]) == [("negative_lag", "RMQ_FOREIGN_HA_CLIENT")]


def test_the_incident_headline_number_is_no_store_offset(incident_log: list[str]) -> None:
    log = parse_broker_log(incident_log)
    first = next(
        f
        for f in ha_findings(master_max=None, replica_max=None, log=log)
        if f.evidence["first_seen"] == "2019-12-03 17:42:06"
    )
    ev = first.evidence
    assert ev["lag_bytes"] == -6868909625984868736 and ev["ack_offset"] is None
    # The master max at that line is not in the log, but it is >= 0, so the ack is >= 6.87e18 bytes:
    # 6 EiB, which no commit log reaches. A real stale slave acks a real (small) offset.
    assert ev["ack_offset_min"] == 6868909625984868736 >= IMPLAUSIBLE_OFFSET and ev["ack_implausible"]
    # Its bytes are text for any master max from 234,965,515,936 (~219 GiB, a long-lived production
    # master) on: the ack then starts with "_SE". At exactly that master max the ack is "_SE     ", and
    # master max minus that ack reproduces the logged number.
    assert ev["ascii_if_master_max_at_least"] == 234965515936 and ev["ascii_at_that_master_max"] == "_SE     "
    assert 234965515936 - int.from_bytes(b"_SE     ", "big") == -6868909625984868736
    assert smallest_printable_at_least(6868909625984868736) == int.from_bytes(b"_SE     ", "big")
    assert diagnosed([first]) == [("negative_lag", "RMQ_FOREIGN_HA_CLIENT")]


def test_stale_slave_acks_its_own_old_max_offset() -> None:
    lines = [
        "2024-05-01 10:00:00 INFO ReadSocketService - slave[/10.0.0.9:41000] request offset 81920",
        "2024-05-01 10:01:00 INFO BrokerControllerScheduledThread1 - Slave fall behind master: -71920 bytes",
        "2024-05-01 10:02:00 INFO BrokerControllerScheduledThread1 - Slave fall behind master: -61920 bytes",
    ]
    findings = ha_findings(master_max=20000, replica_max=81920, log=parse_broker_log(lines))
    assert [f.category for f in findings] == ["replica_ahead", "negative_lag"]
    ahead, lag = findings
    assert (ahead.start_num, ahead.end_num, ahead.bytes) == (20000, 81920, 61920)
    assert ahead.evidence["ack_matches_replica_max"] is True
    ev = lag.evidence
    assert (ev["ack_offset"], ev["master_max_offset"], ev["negative_lines"], ev["client"]) == (
        81920,
        20000,
        2,
        "/10.0.0.9:41000",
    )
    assert ev["replica_ahead"] and ev["ack_matches_replica_max"] and not ev["ack_implausible"]
    assert ev["ack_ascii"] is None
    assert diagnosed(findings) == [("replica_ahead", "RMQ_STALE_SLAVE"), ("negative_lag", "RMQ_STALE_SLAVE")]


def test_both_log_spellings_and_a_healthy_lag() -> None:
    log = parse_broker_log(
        [
            "2024-05-01 10:00:00 INFO BrokerControllerScheduledThread1 - Slave fall behind master: 1024 bytes",
            "2024-05-01 10:01:00 INFO BrokerControllerScheduledThread1 - CommitLog: slave fall behind master -5bytes",
            "noise without a timestamp: slave fall behind master 7bytes",
        ]
    )
    assert [(x.lag_bytes, x.at) for x in log.lags] == [
        (1024, "2024-05-01 10:00:00"),
        (-5, "2024-05-01 10:01:00"),
        (7, None),
    ]
    assert [x.lag_bytes for x in log.negative] == [-5]
    assert ha_findings(master_max=100, replica_max=90, log=parse_broker_log(log.lags[0].text.splitlines())) == []
    (lag,) = ha_findings(master_max=None, replica_max=None, log=log)
    assert lag.evidence["ack_offset_min"] == 5 and not lag.evidence["ack_implausible"]
    assert diagnosed([lag]) == [("negative_lag", None)]  # a small unexplained ack: no signature fits


def _master_ha_status() -> str:
    """What HAStatusSubCommand.printStatus prints for a master: its Java printf formats, kept verbatim."""
    head = "\n#MasterAddr\t%s\n#MasterCommitLogMaxOffset\t%d\n#SlaveNum\t%d\n#InSyncSlaveNum\t%d\n" % (  # noqa: UP031
        "10.0.0.1:10911",
        27539373,
        3,
        3,
    )
    table = "%-32s  %-16s %16s %16s %16s %16s\n" % (  # noqa: UP031
        "#SlaveAddr",
        "#SlaveAckOffset",
        "#Diff",
        "#TransferSpeed(KB/s)",
        "#Status",
        "#TransferFromWhere",
    )
    rows = [
        ("10.0.0.2:41234", 27539373, 0, 1.5, "OK", 27000000),
        ("/127.0.0.2:38824", 4123389851770370361, -4123389851742830988, 0.0, "OK", 4123389851770370361),
        ("10.0.0.3:41000", 1000, 27538373, 0.0, "Fall Behind", 1000),
    ]
    return head + table + "".join("%-32s  %-16d %16d %16.2f %16s %16d\n" % r for r in rows)  # noqa: UP031


MASTER_HA_STATUS = _master_ha_status()

SLAVE_HA_STATUS = """
#MasterAddr\t10.0.0.1:10912
#CommitLogMaxOffset\t27539000
#TransferSpeed(KB/s)\t12.50
#LastReadTime\t2024-05-01 10:00:00,123
#LastWriteTime\t2024-05-01 10:00:00,456
#MasterFlushOffset\t27539373
"""


def test_ha_status_negative_diff_reported_ok_is_a_finding() -> None:
    (block,) = parse_ha_status(MASTER_HA_STATUS)
    assert (block.role, block.master_max_offset, block.slave_num) == ("master", 27539373, 3)
    assert [c.status for c in block.connections] == ["OK", "OK", "Fall Behind"]
    (lag,) = ha_findings(master_max=27539373, replica_max=27539373, ha_status=[block], replica_addr="10.0.0.2:10911")
    ev = lag.evidence
    assert (ev["source"], ev["lag_bytes"], ev["ack_ascii"], ev["status_ok"]) == (
        "ha_status",
        -4123389851742830988,
        "99999999",
        True,
    )
    assert ev["client_is_replica"] is False and ev["replica_ahead"] is False
    assert diagnosed([lag]) == [("negative_lag", "RMQ_FOREIGN_HA_CLIENT")]
    (slave,) = parse_ha_status(SLAVE_HA_STATUS)
    assert (slave.role, slave.max_offset, slave.master_flush_offset) == ("slave", 27539000, 27539373)
    assert max_offset_from_status(SLAVE_HA_STATUS) == 27539000
    assert len(parse_ha_status(MASTER_HA_STATUS + SLAVE_HA_STATUS)) == 2


def test_broker_status_gives_the_max_offset() -> None:
    text = "\n".join(
        [
            f"{'brokerVersionDesc':<32}: V4_9_4",
            f"{'commitLogMaxOffset':<32}: 1073741824",
            f"{'commitLogMinOffset':<32}: 0",
            f"{'runtime':<32}: [ 0 days, 1 hours, 2 minutes, 3 seconds ]",
        ]
    )
    status = parse_broker_status(text)
    assert status["brokerVersionDesc"] == "V4_9_4" and status["runtime"].startswith("[ 0 days")
    assert max_offset_from_status(text) == 1073741824


def test_replica_ahead_only_when_the_replica_ends_beyond_the_master() -> None:
    assert replica_ahead_finding(100, 100) is None and replica_ahead_finding(100, None) is None
    f = replica_ahead_finding(100, 160, master_min=0)
    assert f is not None and (f.start_num, f.end_num, f.bytes, f.severity) == (100, 160, 60, "critical")


@pytest.mark.parametrize(
    "value", [0, 1, 0x1F1F1F1F1F1F1F1F, 0x2020202020202020, 0x7E7E7E7E7E7E7E7E, 0x5F5344E96B16E180]
)
def test_smallest_printable_is_the_first_text_at_or_after(value: int) -> None:
    got: Any = smallest_printable_at_least(value)
    assert got is not None and got >= value and decode_ascii_offset(got) is not None
    if decode_ascii_offset(value) is not None:
        assert got == value
    assert smallest_printable_at_least(0x7E7E7E7E7E7E7E7F) is None
