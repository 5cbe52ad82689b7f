"""Processes the lab starts: detached, tracked by PID + start time, stopped only by PID.

A process is started inside a namespace with `nsenter --net=/run/netns/NS ARGV...`,
which execs ARGV in place (same PID). Not `ip netns exec`: that also gives the process a
private (slave) mount namespace, so namespaces the process itself creates with
`ip netns add` (the agent's health endpoint) would be mounted where nobody else, `lab
down` included, could see them. It gets its own session (so it outlives `lab up` and a Ctrl-C
on it), stdin from /dev/null and stdout/stderr appended to a log file.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

from meshhealth.lab.state import ProcessRecord


def start_ticks(pid: int) -> int | None:
    """Field 22 (starttime, clock ticks since boot) of /proc/PID/stat; None when gone
    or a zombie."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = raw[raw.rindex(")") + 2 :].split()
    state, ticks = fields[0], fields[19]
    if state in ("Z", "X"):
        return None
    return int(ticks)


def is_alive(rec: ProcessRecord) -> bool:
    """True when the recorded process still runs (same PID *and* same start time)."""
    _reap(rec.pid)
    return start_ticks(rec.pid) == rec.start_ticks


def _reap(pid: int) -> None:
    """Collect our own exited child so it does not linger as a zombie."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def start_detached(
    netns: str,
    argv: list[str],
    log: Path,
    env: dict[str, str] | None = None,
    *,
    nice: int = 0,
) -> ProcessRecord:
    """Start `argv` inside `netns`, detached (its own session), output to `log`.

    `nice` (-20..19) is the process's scheduling niceness, set before it starts (`nice`
    and `nsenter` exec it: the PID is the process's own)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    full = ["nsenter", f"--net=/run/netns/{netns}", "--", *argv]
    if nice:
        full = ["nice", "-n", str(nice), *full]
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            full,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
            close_fds=True,
        )
    ticks = start_ticks(proc.pid)
    if ticks is None:
        code = proc.wait()
        raise RuntimeError(f"{argv[0]} in {netns} exited at once (code {code}); see {log}")
    # Popen would warn (ResourceWarning) if collected while running: we track it by PID.
    proc.returncode = 0
    return ProcessRecord(pid=proc.pid, start_ticks=ticks, netns=netns, argv=argv, log=str(log))


def signal_process(rec: ProcessRecord, sig: signal.Signals) -> bool:
    """Send `sig` to the recorded process if it is still the same process."""
    if not is_alive(rec):
        return False
    try:
        os.kill(rec.pid, sig)
    except ProcessLookupError:
        return False
    return True


def _wait_gone(pids: dict[int, int], deadline: float) -> dict[int, int]:
    """Poll until every (pid -> start ticks) is gone or the deadline passes; the rest."""
    left = dict(pids)
    while left:
        for pid, ticks in list(left.items()):
            _reap(pid)
            if start_ticks(pid) != ticks:
                del left[pid]
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    return left


def stop_pids(pids: dict[int, int], grace_s: float = 5.0) -> list[int]:
    """SIGTERM every (pid -> start ticks), SIGKILL what is left after `grace_s`.

    Returns the PIDs that were signalled. Only exact (pid, start time) matches are touched.
    """
    signalled: list[int] = []
    live = {p: t for p, t in pids.items() if start_ticks(p) == t}
    for pid in live:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
            signalled.append(pid)
    left = _wait_gone(live, time.monotonic() + grace_s)
    for pid, ticks in left.items():
        if start_ticks(pid) == ticks:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    _wait_gone(left, time.monotonic() + 2.0)
    return signalled


def stop(records: list[ProcessRecord], grace_s: float = 5.0) -> list[int]:
    return stop_pids({r.pid: r.start_ticks for r in records}, grace_s)
