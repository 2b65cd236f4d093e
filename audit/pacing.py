"""How hard the auditor may read a server: a hard keys/s cap, a time per batch, and back-off under load.

The auditor never harms what it audits. A snapshot reads the keyspace in batches (one SCAN page each);
:class:`Pacer` decides how many keys a batch asks for and how long to wait before sending it.

Knobs (:class:`PaceSettings`; inventory settings of the same names, but ``sample_every_s``, which the
inventory calls ``pace_sample_every_s``):

- ``max_keys_per_s`` (default None: no cap). A hard ceiling per server, enforced by a token bucket in
  keys with a burst of a tenth of a second: over any second the snapshot reads at most this many keys.
- ``batch_time_s`` (default 0.05, as pt-table-checksum's ``--chunk-time``). The batch size (SCAN
  COUNT) adapts so the client waits at most about this long for one batch's replies: a slow server or
  big values get smaller batches, so no single pipelined request holds the server's event loop for
  long. (Batches overlap, so the wait is the server time the client's own work did not hide.) The size
  stays between ``min_batch_keys`` (10) and ``max_batch_keys`` (the ``scan_count`` setting).
- ``max_latency_ms`` (default 10): how long another client's request may wait behind one of the
  snapshot's batches. Every ``sample_every_s`` (default 1 s) the snapshot sends one DBSIZE (O(1); a
  +@read ACL user may run it, not PING) on a separate connection *right after* sending a batch, so it
  queues behind that batch exactly as an application's request would; its round trip is the stall one
  batch causes. A stall past the bound shrinks the batch in proportion (the stall grows with the keys
  in a batch), down to ``min_batch_keys``; only a stall past the bound at that size halves the rate.
  (A first version took the least of 3 round trips: the 2nd and 3rd ran with no batch in flight, so
  the minimum never saw the queueing that made the application's p99.) One probe is noisy: a stall
  moves the size at most fourfold, and in a process where other snapshot threads hold the GIL the
  round trip includes that wait (a process per side, the default, avoids it).
- ``max_other_ops_per_s`` (default None): INFO stats ``instantaneous_ops_per_sec`` less the
  auditor's own command rate, the load from everyone else. Past the bound it halves the rate actually
  read (multiplicative decrease, down to ``min_keys_per_s``, 100).

  Each sample within bounds raises a lowered rate by a quarter, back to the cap (or to no cap once past
  twice the rate before the first back-off), and a shrunk batch limit by a quarter when the stall is
  under half the bound. While backed off, the token bucket paces at the lowered rate. A server that
  refuses INFO still gets the latency bound.

Deprecated: ``qps`` counted commands per server (the old reader sent 4 per key plus SCAN). It maps to
``max_keys_per_s = qps / 4`` with :data:`QPS_DEPRECATION` as the warning text.

Everything here is pure arithmetic over an injected clock and sleep, so it is tested without a server
(tests/unit/test_pacing.py); the snapshot does the sampling and feeds the numbers in.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

COMMANDS_PER_KEY_BEFORE = 4
"""What one key cost in commands when `qps` was defined (TYPE, PTTL, length, first page)."""

QPS_DEPRECATION = (
    "setting `qps` is deprecated: it counted commands (about 4 per key), so qps={qps} now means "
    "max_keys_per_s={keys}; set `max_keys_per_s` instead (default: no cap, with adaptive pacing)"
)


def keys_per_s_from_qps(qps: float) -> float:
    return qps / COMMANDS_PER_KEY_BEFORE


def qps_warning(qps: float) -> str:
    return QPS_DEPRECATION.format(qps=qps, keys=f"{keys_per_s_from_qps(qps):g}")


@dataclass(frozen=True, slots=True)
class PaceSettings:
    max_keys_per_s: float | None = None
    batch_time_s: float = 0.05
    max_batch_keys: int = 1000
    min_batch_keys: int = 10
    max_latency_ms: float | None = 10.0
    max_other_ops_per_s: float | None = None
    sample_every_s: float = 1.0
    min_keys_per_s: float = 100.0

    def __post_init__(self) -> None:
        if self.max_keys_per_s is not None and self.max_keys_per_s <= 0:
            raise ValueError("max_keys_per_s must be positive (or None for no cap)")
        if self.batch_time_s <= 0 or self.sample_every_s <= 0:
            raise ValueError("batch_time_s and sample_every_s must be positive")
        if not 0 < self.min_batch_keys <= self.max_batch_keys:
            raise ValueError("need 0 < min_batch_keys <= max_batch_keys")

    @classmethod
    def from_qps(cls, qps: float, **kw: object) -> PaceSettings:
        """The deprecated `qps` setting as a keys/s cap; emits a DeprecationWarning with the text to show."""
        warnings.warn(qps_warning(qps), DeprecationWarning, stacklevel=2)
        return cls(max_keys_per_s=keys_per_s_from_qps(qps), **kw)  # type: ignore[arg-type]


class Pacer:
    """Batch size and waits for one server. Not thread-safe: one per snapshot side."""

    def __init__(
        self,
        settings: PaceSettings,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.s = settings
        self._clock = clock
        self._sleep = sleep
        self.batch_keys = settings.max_batch_keys
        self.batch_limit = settings.max_batch_keys  # max_batch_keys, lowered while batches stall others
        self.allowed: float | None = settings.max_keys_per_s  # the current rate: the cap, lowered by back-off
        self._tokens = 0.1 * settings.max_keys_per_s if settings.max_keys_per_s else 0.0  # a full bucket
        self._last = clock()
        self._next_sample = self._last + settings.sample_every_s
        self.waited_s = 0.0
        self.backoffs = 0
        self.shrinks = 0
        self.samples = 0
        self._unpaced_keys_per_s = 0.0  # the rate before the first back-off from "no cap"

    # -- token bucket ---------------------------------------------------------------------------------

    def before_batch(self, n_keys: int) -> None:
        """Block until `n_keys` may be read at the allowed rate (no wait when there is no cap)."""
        rate = self.allowed
        now = self._clock()
        if rate is None:
            self._last = now
            return
        burst = max(rate * 0.1, float(n_keys))
        self._tokens = min(burst, self._tokens + (now - self._last) * rate) - n_keys
        self._last = now
        if self._tokens < 0:
            delay = -self._tokens / rate
            self.waited_s += delay
            self._sleep(delay)
            self._last = self._clock()
            self._tokens = 0.0

    # -- batch time -----------------------------------------------------------------------------------

    def after_batch(self, n_keys: int, server_s: float) -> None:
        """The client waited `server_s` for a batch of `n_keys`: steer the next batch to the target time.

        The wait is the part of the batch's server time not hidden behind the client's own work (the
        batches overlap), so a server that keeps up costs no wait and the batch grows back to the max.
        """
        if n_keys <= 0:
            return
        if server_s <= 0:
            self.batch_keys = min(self.batch_limit, self.batch_keys * 2)
            return
        per_key = server_s / n_keys
        want = int(self.s.batch_time_s / per_key)
        # move at most 2x per batch either way, so one odd batch does not swing the size
        want = max(self.batch_keys // 2, min(self.batch_keys * 2, want))
        self.batch_keys = max(self.s.min_batch_keys, min(self.batch_limit, want))

    # -- back-off -------------------------------------------------------------------------------------

    def sample_due(self) -> bool:
        return self._clock() >= self._next_sample

    def observe(
        self, *, latency_ms: float | None, server_ops_per_s: float | None, own_ops_per_s: float, own_keys_per_s: float
    ) -> bool:
        """Feed one sample of the server; returns True when it caused a back-off (of the rate or the size).

        `latency_ms` is the stall: one round trip sent right behind a batch (None: not measured).
        """
        self.samples += 1
        self._next_sample = self._clock() + self.s.sample_every_s
        bound = self.s.max_latency_ms
        fit = 1.0 if bound is None or not latency_ms else bound / latency_ms  # < 1: the stall is too long
        others = None if server_ops_per_s is None else server_ops_per_s - own_ops_per_s
        loaded = self.s.max_other_ops_per_s is not None and others is not None and others > self.s.max_other_ops_per_s
        # smaller batches are the remedy for a stall; the rate only once they cannot shrink
        shrink = fit < 1 and self.batch_keys > self.s.min_batch_keys
        if shrink:
            self._shrink_batches(fit)
        if loaded or (fit < 1 and not shrink):
            self._halve_rate(own_keys_per_s)
        if fit < 1 or loaded:
            return True
        if fit > 2:
            self.batch_limit = min(self.s.max_batch_keys, int(self.batch_limit * 1.25) + 1)
        self._raise_rate()
        return False

    def _shrink_batches(self, ratio: float) -> None:
        """Scale the batch limit to fit the bound, with a margin; at most 4x down per sample."""
        self.batch_limit = max(self.s.min_batch_keys, int(self.batch_keys * max(0.25, 0.8 * ratio)))
        self.batch_keys = min(self.batch_keys, self.batch_limit)
        self.shrinks += 1

    def _halve_rate(self, own_keys_per_s: float) -> None:
        if self.allowed is None:
            self._unpaced_keys_per_s = own_keys_per_s
        # halve what is actually read: a cap far above the real rate would bind nothing once halved
        actual = max(own_keys_per_s, self.s.min_keys_per_s)
        current = actual if self.allowed is None else min(self.allowed, actual)
        self.allowed = max(self.s.min_keys_per_s, current / 2)
        self.backoffs += 1

    def _raise_rate(self) -> None:
        cap = self.s.max_keys_per_s
        if self.allowed is not None and (cap is None or self.allowed < cap):
            raised = self.allowed * 1.25
            if cap is not None:
                self.allowed = min(cap, raised)
            else:  # back to no cap once well past the rate that was fine before the back-off
                self.allowed = None if raised >= 2 * self._unpaced_keys_per_s else raised

    def report(self) -> dict[str, float | int | None]:
        return {
            "max_keys_per_s": self.s.max_keys_per_s,
            "allowed_keys_per_s_at_end": self.allowed,
            "batch_keys_at_end": self.batch_keys,
            "pacing_wait_s": round(self.waited_s, 3),
            "backoffs": self.backoffs,
            "batch_shrinks": self.shrinks,
            "batch_limit_keys_at_end": self.batch_limit,
            "samples": self.samples,
        }
