"""Garbage-collector settings for processes that run big probe rounds.

A probe round allocates a few short-lived container objects per probe (trio tasks,
cancel scopes, results) while up to 1,024 probes are in flight. With CPython's default
thresholds (700, 10, 10) that triggers ~700 young and ~6 full collections per 20,000
probes, each full one walking every live object: measured at 20-30 % of the CPU of a
20,000-probe round (docs/performance.md). Nearly all of it is freed by reference
counting anyway, so collecting 14x less often costs a few MB at most.

Process-wide, so only entry points (the agent, `meshhealth probe`, benchmarks) call it;
library code never does.
"""

from __future__ import annotations

import gc

from meshhealth import defaults


def tune_gc_for_probing() -> None:
    """Collect less often, and move everything alive now out of the collector's way."""
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(defaults.GC_GEN0_THRESHOLD, gen1, gen2)
    gc.freeze()  # objects from start-up (modules, config) are never scanned again
