"""The Pacer on an injected clock: the keys/s cap, the batch-time target, back-off and recovery."""

from __future__ import annotations

import pytest

from audit.pacing import Pacer, PaceSettings, keys_per_s_from_qps, qps_warning


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.slept += s
        self.now += s


def pacer(**kw: object) -> tuple[Pacer, FakeClock]:
    clock = FakeClock()
    return Pacer(PaceSettings(**kw), clock=clock, sleep=clock.sleep), clock  # type: ignore[arg-type]


def test_the_cap_bounds_keys_per_second_whatever_the_batch_size() -> None:
    p, clock = pacer(max_keys_per_s=1000)
    for _ in range(50):  # 50 batches of 100 keys, the client itself infinitely fast
        p.before_batch(100)
    # 5000 keys at 1000/s take 5 s, less the first batch (the bucket lets one batch through at once)
    assert clock.now - 100.0 == pytest.approx(4.9, abs=0.01)
    assert p.waited_s == pytest.approx(4.9, abs=0.01)


def test_no_cap_never_sleeps() -> None:
    p, clock = pacer()
    for _ in range(100):
        p.before_batch(1000)
    assert clock.slept == 0


def test_a_slow_client_is_not_slowed_further() -> None:
    p, clock = pacer(max_keys_per_s=1000)
    for _ in range(10):
        clock.now += 0.5  # the client needs 0.5 s per batch of 100: 200 keys/s, under the cap
        p.before_batch(100)
    assert clock.slept == 0


def test_batches_shrink_to_the_target_time_and_grow_back() -> None:
    p, _ = pacer(batch_time_s=0.05, max_batch_keys=1000, min_batch_keys=10)
    assert p.batch_keys == 1000
    for _ in range(10):  # the server takes 1 ms per key: 1000 keys = 1 s, 20x the target
        p.after_batch(p.batch_keys, p.batch_keys * 0.001)
    assert p.batch_keys == 50  # 50 keys * 1 ms = the 50 ms target
    for _ in range(10):  # then the server keeps up: no wait at all
        p.after_batch(p.batch_keys, 0.0)
    assert p.batch_keys == 1000


def test_one_odd_batch_moves_the_size_at_most_twofold() -> None:
    p, _ = pacer(batch_time_s=0.05, max_batch_keys=1000)
    p.after_batch(1000, 100.0)
    assert p.batch_keys == 500


def test_a_stall_past_the_bound_shrinks_batches_to_fit_then_they_grow_back() -> None:
    p, clock = pacer(max_latency_ms=1.0, sample_every_s=1.0, max_batch_keys=1000, min_batch_keys=10)
    assert not p.sample_due()
    clock.now += 1.0
    assert p.sample_due()
    # a request queued behind one 1000-key batch waited 2.5 ms: 0.8 * 1/2.5 of the batch fits the bound
    assert p.observe(latency_ms=2.5, server_ops_per_s=None, own_ops_per_s=300_000, own_keys_per_s=100_000)
    assert p.batch_keys == p.batch_limit == 320 and p.shrinks == 1
    assert p.allowed is None and p.backoffs == 0  # the rate is left alone while the size can shrink
    p.after_batch(320, 0.0)  # a server that keeps up no longer grows the batch past the limit
    assert p.batch_keys == 320
    # a stall far past the bound moves the size at most fourfold per sample
    assert p.observe(latency_ms=100.0, server_ops_per_s=None, own_ops_per_s=0, own_keys_per_s=0)
    assert p.batch_limit == 80
    # within the bound but not under half of it: the limit holds
    assert not p.observe(latency_ms=0.7, server_ops_per_s=None, own_ops_per_s=0, own_keys_per_s=0)
    assert p.batch_limit == 80
    limits = []
    for _ in range(20):
        assert not p.observe(latency_ms=0.2, server_ops_per_s=None, own_ops_per_s=0, own_keys_per_s=0)
        limits.append(p.batch_limit)
    assert limits[0] == 101  # up by a quarter per calm sample
    assert limits[-1] == 1000  # back to max_batch_keys, never past it
    p.after_batch(p.batch_keys, 0.0)
    assert p.batch_keys == 160  # the batch itself regrows at most 2x per batch, as it always did


def test_a_stall_at_the_smallest_batch_halves_the_rate_then_it_recovers_to_no_cap() -> None:
    p, _ = pacer(max_latency_ms=5.0, max_batch_keys=10, min_batch_keys=10)
    backed = p.observe(latency_ms=20.0, server_ops_per_s=None, own_ops_per_s=300_000, own_keys_per_s=100_000)
    assert backed and p.allowed == 50_000 and p.backoffs == 1 and p.shrinks == 0
    p.observe(latency_ms=30.0, server_ops_per_s=None, own_ops_per_s=150_000, own_keys_per_s=50_000)
    assert p.allowed == 25_000
    rates = []
    for _ in range(20):
        p.observe(latency_ms=1.0, server_ops_per_s=None, own_ops_per_s=75_000, own_keys_per_s=p.allowed or 0)
        rates.append(p.allowed)
    assert rates[0] == 31_250  # up by a quarter per good sample
    assert rates[-1] is None  # past twice the rate that was fine before: no cap again


def test_other_clients_load_is_the_server_rate_less_the_auditors_own() -> None:
    p, _ = pacer(max_latency_ms=None, max_other_ops_per_s=10_000)
    # the server does 400k ops/s, 395k of them the auditor's: others at 5k, under the bound
    assert not p.observe(latency_ms=None, server_ops_per_s=400_000, own_ops_per_s=395_000, own_keys_per_s=120_000)
    assert p.observe(latency_ms=None, server_ops_per_s=420_000, own_ops_per_s=395_000, own_keys_per_s=120_000)
    assert p.allowed == 60_000


def test_back_off_never_goes_below_the_floor_nor_recovers_past_the_cap() -> None:
    p, _ = pacer(max_keys_per_s=1000, max_latency_ms=1.0, min_keys_per_s=100, min_batch_keys=10)
    for _ in range(10):  # the batch shrinks to the floor first (1000 -> 250 -> 62 -> 15 -> 10), then the rate
        p.observe(latency_ms=50.0, server_ops_per_s=None, own_ops_per_s=0, own_keys_per_s=0)
    assert p.batch_keys == 10 and p.shrinks == 4
    assert p.allowed == 100
    for _ in range(30):
        p.observe(latency_ms=0.1, server_ops_per_s=None, own_ops_per_s=0, own_keys_per_s=0)
    assert p.allowed == 1000


def test_qps_maps_to_a_keys_per_second_cap_with_a_deprecation_warning() -> None:
    assert keys_per_s_from_qps(20000) == 5000
    assert "max_keys_per_s=5000" in qps_warning(20000)
    with pytest.warns(DeprecationWarning, match="qps"):
        s = PaceSettings.from_qps(20000)
    assert s.max_keys_per_s == 5000


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="max_keys_per_s"):
        PaceSettings(max_keys_per_s=0)
    with pytest.raises(ValueError, match="min_batch_keys"):
        PaceSettings(min_batch_keys=0)


def test_back_off_under_a_loose_cap_halves_the_actual_rate() -> None:
    p, _ = pacer(max_keys_per_s=1_000_000, max_latency_ms=5.0)
    p.batch_keys = p.s.min_batch_keys  # the size is at its floor: the stall can only be met by the rate
    assert p.observe(latency_ms=50.0, server_ops_per_s=None, own_ops_per_s=0, own_keys_per_s=80_000)
    assert p.allowed == 40_000
