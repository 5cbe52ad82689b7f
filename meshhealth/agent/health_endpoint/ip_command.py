"""The `ip` command (iproute2) as the agent's netlink edge (sync, blocking).

The agent changes links, addresses and routes by running `ip`, not through a netlink
library in its own process: a netlink library costs the long-running agent about 10 MB
of RSS for what runs once at start and, for routes, once a minute. `ip -n NAME` enters
network namespace /run/netns/NAME itself; `netns=None` is the agent's own namespace.
Changes go in batches (`ip -batch -`, one process per batch); reads use `-json`.

Every function blocks (up to `defaults.IP_TIMEOUT_S`) and is meant for a worker thread. Failures
raise PlumbingError with the command, where it ran and what `ip` said.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

from meshhealth import defaults

_FAILED_RE = re.compile(r"^Command failed -:(\d+)$")
# What `ip` says when the object to change or show is not there.
NOT_FOUND_MARKERS = ("does not exist", "Cannot find device", "No such device")


class PlumbingError(RuntimeError):
    """A step of building the endpoint or of programming routes failed; the message
    says which and why."""


@dataclass(frozen=True, slots=True)
class BatchFailure:
    """One command of a `-force` batch that `ip` refused."""

    index: int  # 0-based position in the batch
    command: str
    error: str  # what `ip` said, e.g. "RTNETLINK answers: File exists"

    @property
    def exists(self) -> bool:
        """The object to add is there already (EEXIST)."""
        return "File exists" in self.error


def _where(netns: str | None) -> str:
    return f"network namespace {netns}" if netns else "the node's network namespace"


def _run(netns: str | None, args: Sequence[str], stdin: str | None = None) -> tuple[int, str, str]:
    argv = ["ip", *(("-n", netns) if netns else ()), *args]
    try:
        done = subprocess.run(
            argv,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=defaults.IP_TIMEOUT_S,
            check=False,
        )
    except FileNotFoundError as exc:
        raise PlumbingError("the `ip` command (iproute2) is not installed") from exc
    except subprocess.TimeoutExpired as exc:
        raise PlumbingError(
            f"`ip {' '.join(args)}` in {_where(netns)} gave no answer in {defaults.IP_TIMEOUT_S:g}s"
        ) from exc
    return done.returncode, done.stdout, done.stderr


def _one_line(text: str) -> str:
    return "; ".join(line.strip() for line in text.splitlines() if line.strip())


def ip(netns: str | None, *args: str) -> None:
    """Run `ip ARGS` in `netns`; PlumbingError when it fails."""
    code, _, err = _run(netns, args)
    if code != 0:
        raise PlumbingError(f"`ip {' '.join(args)}` in {_where(netns)}: {_one_line(err)}")


def ip_json(netns: str | None, *args: str) -> list[dict[str, object]] | None:
    """`ip -json ARGS` in `netns`, parsed. None when `ip` says the object does not exist
    (e.g. `link show dev NAME` of a missing link); PlumbingError on any other failure."""
    code, out, err = _run(netns, ("-json", *args))
    if code != 0:
        if any(marker in err for marker in NOT_FOUND_MARKERS):
            return None
        raise PlumbingError(f"`ip -json {' '.join(args)}` in {_where(netns)}: {_one_line(err)}")
    try:
        parsed = json.loads(out) if out.strip() else []
    except json.JSONDecodeError as exc:
        raise PlumbingError(f"`ip -json {' '.join(args)}` printed no JSON: {exc}") from exc
    if not isinstance(parsed, list) or not all(isinstance(item, dict) for item in parsed):
        raise PlumbingError(f"`ip -json {' '.join(args)}` printed no list of objects")
    return cast("list[dict[str, object]]", parsed)


def ip_batch(netns: str | None, commands: Sequence[str]) -> None:
    """Run `commands` as one `ip -batch` (one process); stops at the first failure and
    raises PlumbingError naming that command."""
    failures = _batch(netns, commands, force=False)
    if failures:
        first = failures[0]
        raise PlumbingError(f"`ip {first.command}` in {_where(netns)}: {first.error}")


def ip_batch_each(netns: str | None, commands: Sequence[str]) -> list[BatchFailure]:
    """Run every command of `commands` in one `ip -force -batch`; a failed one does not
    stop the rest. Returns the failures, in order."""
    return _batch(netns, commands, force=True)


def _batch(netns: str | None, commands: Sequence[str], *, force: bool) -> list[BatchFailure]:
    if not commands:
        return []
    for command in commands:
        if "\n" in command:
            raise ValueError(f"an ip batch command must be one line: {command!r}")
    args = ("-force", "-batch", "-") if force else ("-batch", "-")
    code, _, err = _run(netns, args, stdin="".join(f"{c}\n" for c in commands))
    if code == 0:
        return []
    failures = parse_batch_errors(err, commands)
    if not failures:  # failed, but not in a way `ip` tied to a line
        raise PlumbingError(f"`ip -batch` in {_where(netns)}: {_one_line(err) or f'exit {code}'}")
    return failures


def parse_batch_errors(stderr: str, commands: Sequence[str]) -> list[BatchFailure]:
    """`ip -batch` prints what went wrong, then `Command failed -:LINE`. Pure."""
    failures: list[BatchFailure] = []
    pending: list[str] = []
    for raw in stderr.splitlines():
        line = raw.strip()
        match = _FAILED_RE.match(line)
        if match is None:
            if line:
                pending.append(line)
            continue
        index = int(match.group(1)) - 1
        if 0 <= index < len(commands):
            failures.append(BatchFailure(index, commands[index], "; ".join(pending) or "failed"))
        pending = []
    return failures
