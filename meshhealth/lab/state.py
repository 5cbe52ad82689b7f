"""The lab's state file: what `lab up` created, so `lab down` can remove it after a crash.

`<lab dir>/state.json`, written atomically (temp file + rename) as soon as the first
thing exists and after every change. The plan (names, addresses) is recomputed from
`options`; the file lists what was actually created, in order.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

STATE_VERSION: Final = 1


@dataclass(slots=True)
class ProcessRecord:
    """A process the lab started. `start_ticks` is field 22 of /proc/PID/stat: with the
    PID it identifies the process, so a recycled PID is never signalled."""

    pid: int
    start_ticks: int
    netns: str
    argv: list[str]
    log: str


@dataclass(slots=True)
class FaultRecord:
    kind: str
    target: str  # `lab1/node2` or, for etcd faults, `lab1`
    since: float  # unix seconds


@dataclass(slots=True)
class LabState:
    prefix: str
    dir: str
    nodes: int
    clusters: int
    interval_s: float
    agents: bool
    phase: str = "building"  # building -> ready; `down` removes the file
    created_at: float = field(default_factory=time.time)
    namespaces: list[str] = field(default_factory=list)
    # key: "etcd/lab1", "agent/lab1/node2"
    processes: dict[str, ProcessRecord] = field(default_factory=dict)
    faults: list[FaultRecord] = field(default_factory=list)
    # the host's ARP table limits before `lab up` raised them (neigh_table.py); restored
    # by `lab down`. Empty when they were large enough.
    neigh_thresholds: dict[str, int] = field(default_factory=dict)
    # `lab up` made a read-only /proc/sys/net writable (in a container, proc_sys.py);
    # `lab down` removes that mount.
    proc_sys_net_mounted: bool = False
    # members of each cluster's etcd: 1 (plain http, in the fabric namespace) or more
    # (TLS with client certificates, a namespace each: meshhealth.lab.etcd_members)
    etcd_members: int = 1
    # address families: ipv4 | dual | ipv6 (meshhealth.lab.plan.IP_MODES)
    ip_mode: str = "ipv4"
    # etcd authentication on, one etcd user per agent (meshhealth.lab.etcd_auth)
    etcd_auth: bool = False
    # racks joined by a router namespace (meshhealth.lab.plan, "Racks"); 1: no racks
    racks: int = 1
    version: int = STATE_VERSION

    @property
    def path(self) -> Path:
        return Path(self.dir) / "state.json"

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    def add_namespace(self, name: str) -> None:
        if name not in self.namespaces:
            self.namespaces.append(name)

    def fault(self, kind: str, target: str) -> FaultRecord | None:
        for f in self.faults:
            if f.kind == kind and f.target == target:
                return f
        return None


class StateError(ValueError):
    """The state file is there but cannot be read."""


def state_from_json(text: str) -> LabState:
    try:
        raw: dict[str, Any] = json.loads(text)
        if raw.get("version") != STATE_VERSION:
            raise StateError(f"state version {raw.get('version')!r}, expected {STATE_VERSION}")
        procs = {k: ProcessRecord(**v) for k, v in raw.pop("processes", {}).items()}
        faults = [FaultRecord(**f) for f in raw.pop("faults", [])]
        return LabState(**raw, processes=procs, faults=faults)
    except (json.JSONDecodeError, TypeError, AttributeError) as exc:
        raise StateError(f"invalid lab state: {exc}") from exc


def save(state: LabState) -> None:
    path = state.path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".state.json.{os.getpid()}")
    tmp.write_text(state.to_json())
    os.replace(tmp, path)


def load(path: Path) -> LabState | None:
    """The state at `path`, None when there is none."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        return state_from_json(text)
    except StateError as exc:
        raise StateError(f"{path}: {exc}") from exc
