"""How long a test waits for something that will happen: scaled to how fast this machine is now.

A wait that is only a safety net (a child process's next acknowledgement, a background flush)
must not fail a correct run on a slow or loaded machine, so every such wait goes through
:func:`patience`. The factor is measured once per test process: a fixed piece of pure-Python
work timed against what it takes on an idle development machine, and the load average per CPU;
the larger wins, never below 1. Each wait also looks at the load average then: a machine that
got busy after the tests started (another suite, a build) must not fail them either.
``OVOS_MEMORY_TEST_PATIENCE`` sets the factor outright.
"""
from __future__ import annotations

import os
import time

__all__ = ["FACTOR", "patience"]

#: Seconds the calibration loop takes on an idle 2-core development machine.
_IDLE_LOOP_S = 0.012
_MAX_FACTOR = 30.0


def _loop_seconds() -> float:
    best = float("inf")
    for _ in range(3):  # the best of three: one descheduling is not the machine's speed
        start = time.perf_counter()
        sum(i * i for i in range(100_000))
        best = min(best, time.perf_counter() - start)
    return best


_FORCED = os.environ.get("OVOS_MEMORY_TEST_PATIENCE")


def _load() -> float:
    """The load average per CPU now (1.0 where there is none)."""
    try:
        return os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:  # not every platform has a load average
        return 1.0


def _factor() -> float:
    if _FORCED:
        return max(1.0, float(_FORCED))
    return min(_MAX_FACTOR, max(1.0, _loop_seconds() / _IDLE_LOOP_S, _load()))


FACTOR = _factor()


def patience(seconds: float) -> float:
    """``seconds`` scaled for this machine: how long to wait before calling it a failure."""
    return seconds * (FACTOR if _FORCED else min(_MAX_FACTOR, max(FACTOR, _load())))
