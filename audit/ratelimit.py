"""A token bucket: the auditor's promise not to load the servers it audits beyond `qps` commands/s."""

from __future__ import annotations

import threading
import time


class RateLimiter:
    """Blocks until `n` commands may be sent. Bursts up to one second's worth of tokens."""

    def __init__(self, qps: float) -> None:
        if qps <= 0:
            raise ValueError("qps must be positive")
        self.qps = float(qps)
        self._tokens = self.qps
        self._last = time.monotonic()
        self._lock = threading.Lock()
        self.waited_s = 0.0

    def acquire(self, n: int = 1) -> None:
        with self._lock:
            now = time.monotonic()
            self._tokens = min(self.qps, self._tokens + (now - self._last) * self.qps)
            self._last = now
            self._tokens -= n
            deficit = -self._tokens
        if deficit > 0:
            delay = deficit / self.qps
            self.waited_s += delay
            time.sleep(delay)
