"""The health endpoint's child process: its command line, its output, stopping it.

The supervisor (meshhealth.agent.health_endpoint.supervisor) decides when a child starts
and restarts; this module holds what it does with one child: the `meshhealth responder`
command line, reading its stdout (the "listening" line that says it is ready) and stderr
(logged, the last lines kept for the restart message) line by line, and stopping it by
PID.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable

import trio

from meshhealth import defaults
from meshhealth.addresses import format_address

log = logging.getLogger("meshhealth.agent.health_endpoint.supervisor")

READY_MARKER = b"responder listening on"  # first line `meshhealth responder` prints


def responder_argv(
    python: str, health_ip: str, port: int, node_name: str, health_ip_secondary: str | None = None
) -> list[str]:
    """The endpoint's responder command line (without `ip netns exec`): one `--listen`
    per address (two for a dual-stack endpoint). Pure."""
    listen = ["--listen", format_address(health_ip, port)]
    if health_ip_secondary is not None:
        listen += ["--listen", format_address(health_ip_secondary, port)]
    return [
        python,
        "-m",
        "meshhealth",
        "responder",
        *listen,
        "--passive",
        "--node-name",
        node_name,
    ]


async def stop_process(proc: trio.Process, grace_s: float) -> None:
    """SIGTERM by PID, SIGKILL after `grace_s`, reap; shielded (runs on cancel too)."""
    with trio.CancelScope(shield=True):
        if proc.returncode is None:
            proc.terminate()
            with trio.move_on_after(grace_s):
                await proc.wait()
        if proc.returncode is None:
            log.warning("health endpoint: responder pid %d ignored SIGTERM; killing", proc.pid)
            proc.kill()
            with trio.move_on_after(grace_s):
                await proc.wait()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                await trio.aclose_forcefully(stream)


def ready_watcher(ready: trio.Event) -> Callable[[bytes], None]:
    def on_line(line: bytes) -> None:
        if READY_MARKER in line:
            ready.set()
        log.debug("health endpoint responder: %s", line.decode(errors="replace"))

    return on_line


def stderr_logger(tail: collections.deque[str]) -> Callable[[bytes], None]:
    def on_line(line: bytes) -> None:
        text = line.decode(errors="replace").strip()
        if text:
            tail.append(text)
            log.warning("health endpoint responder: %s", text)

    return on_line


async def pump_lines(
    stream: trio.abc.ReceiveStream, on_line: Callable[[bytes], None], done: trio.Event | None
) -> None:
    """Read `stream` to its end, calling `on_line` per line (long lines are cut)."""
    buffer = b""
    try:
        while True:
            try:
                chunk = await stream.receive_some(defaults.ENDPOINT_MAX_LINE_BYTES)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                break
            if not chunk:
                break
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                on_line(line)
            if len(buffer) > defaults.ENDPOINT_MAX_LINE_BYTES:
                on_line(buffer)
                buffer = b""
        if buffer:
            on_line(buffer)
    finally:
        if done is not None:
            done.set()
