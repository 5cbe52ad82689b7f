"""`lab fault starve`: a detached helper that runs a node's agent in fits.

    python -m meshhealth.lab.starve PID START_TICKS STOP_S PERIOD_S

SIGSTOP the agent, wait STOP_S, SIGCONT it, wait the rest of PERIOD_S, again, as an
overloaded node's scheduler would. The helper signals only that PID, and only while its
start time (field 22 of /proc/PID/stat) still matches, so a recycled PID is never
touched. It ends when the agent is gone, or on SIGTERM/SIGINT (`fault clear`, `lab
down`), always leaving the agent running (SIGCONT) on its way out.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from types import FrameType

from meshhealth.lab.processes import start_ticks


class _Stop(Exception):
    pass


def _on_term(signum: int, frame: FrameType | None) -> None:
    raise _Stop


def check_burst(stop_s: float, period_s: float) -> None:
    """ValueError unless 0 < stop_s < period_s (the agent must run some of the time)."""
    if not 0 < stop_s < period_s:
        raise ValueError(f"need 0 < stop ({stop_s:g}s) < period ({period_s:g}s)")


def _send(pid: int, ticks: int, sig: signal.Signals) -> bool:
    if start_ticks(pid) != ticks:
        return False
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def run(pid: int, ticks: int, stop_s: float, period_s: float) -> int:
    check_burst(stop_s, period_s)
    signal.signal(signal.SIGTERM, _on_term)
    signal.signal(signal.SIGINT, _on_term)
    try:
        while _send(pid, ticks, signal.SIGSTOP):
            time.sleep(stop_s)
            if not _send(pid, ticks, signal.SIGCONT):
                break
            time.sleep(period_s - stop_s)
    except _Stop:
        pass
    finally:
        _send(pid, ticks, signal.SIGCONT)
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    return run(int(argv[0]), int(argv[1]), float(argv[2]), float(argv[3]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
