"""A node's roll-ups (`state/rollup/v1/<cluster>/<node>`, no lease): per path this node
probes, one summary per closed 10-minute and per closed 1-hour window of wall-clock
time (probes, failures, RTT p50 / p95 / max), for `meshhealth report` (docs/report.md).

Written by the node's agent when a 10-minute window closes (at most once per 10 minutes)
and read back by it when it starts, so the roll-ups outlive restarts; without a lease,
the value also outlives the node (`report` reads windows by their time).

On the wire each path is a map `{target, path, m10, h1}`; `m10` and `h1` are flat lists
of integers, six per window, oldest first:

    [start, probes, failures, p50_us, p95_us, max_us, start, probes, ...]

`start` is the window's number (unix seconds // the window length) for the first window
and the number of windows since the previous one for the others (>= 1); the RTTs are
whole microseconds of the successful probes, nil when none succeeded (or none
measured one). This is about 12
bytes a window where a map would take 60, so a value holds 5 times the windows under
the same byte bound (defaults.ROLLUP_MAX_BYTES); `path_wire_bytes` says what one path
costs, so the agent keeps its value within that bound without encoding it whole.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

from meshhealth.wire import fields as f
from meshhealth.wire.envelope import Codec
from meshhealth.wire.fields import DecodeError, Field

# The window lengths are units of the format (not tunables): readers place windows by them.
MINUTE_S = 60
MINUTES10_S = 10 * MINUTE_S
HOUR_S = 3600
INTS_PER_WINDOW = 6
# Caps, far above any real use (a 1 s interval gives 3,600 probes an hour; an RTT is at
# most a probe timeout), low enough to bound what a reader allocates.
MAX_PROBES = 1_000_000
MAX_RTT_US = 3_600_000_000
MAX_WINDOWS = 100_000  # per list; the value's byte bound is the real limit
MAX_PATHS = 100_000
MAX_PATH_CHARS = 64
# `node/icmp`, `endpoint/http@secondary`, `node/tcp:10250`, and path kinds newer writers add:
# the report shows them as they are.
PATH_RE = re.compile(r"[a-z][a-z0-9-]*/[a-z][a-z0-9-]*(?::[1-9][0-9]{0,4})?(?:@[a-z][a-z0-9-]*)?")


@dataclass(frozen=True, slots=True)
class Window:
    """One closed window of one path."""

    start: float  # unix seconds, a multiple of the window length
    probes: int  # >= 1: a window without probes is not kept
    failures: int  # 0 .. probes
    rtt_p50_s: float | None  # of the successful probes; None when none succeeded
    rtt_p95_s: float | None
    rtt_max_s: float | None

    @property
    def availability(self) -> float:
        """1 - failures / probes."""
        return 1.0 - self.failures / self.probes


@dataclass(frozen=True, slots=True)
class PathRollup:
    """The closed windows of one path: `cluster/node` probed as `path` (`node/icmp`...)."""

    cluster: str
    node: str
    path: str
    minutes10: tuple[Window, ...] = ()
    hours: tuple[Window, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeRollups:
    """Everything one node publishes: its paths, sorted by (cluster, node, path)."""

    cluster: str
    node: str
    written_at: float  # unix seconds
    paths: tuple[PathRollup, ...] = ()


def _us(seconds: float | None) -> int | None:
    return None if seconds is None else min(MAX_RTT_US, max(0, round(seconds * 1e6)))


def windows_to_ints(windows: Sequence[Window], length: int) -> list[int | None]:
    """The flat wire list of `windows` (oldest first), `length` seconds each."""
    out: list[int | None] = []
    previous: int | None = None
    for window in windows:
        number = int(window.start // length)
        out.append(number if previous is None else number - previous)
        previous = number
        out += [window.probes, window.failures]
        out += [_us(window.rtt_p50_s), _us(window.rtt_p95_s), _us(window.rtt_max_s)]
    return out


def _int(value: object, where: str, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:
        got = f.short(value)
        raise DecodeError(f"field '{where}': must be an integer {low}..{high}, got {got}")
    return value


def _windows(length: int) -> f.Check:
    def check(value: object, where: str) -> tuple[Window, ...]:
        if not isinstance(value, list):
            raise DecodeError(f"field '{where}': must be a list, got {f.type_name(value)}")
        if len(value) % INTS_PER_WINDOW:
            raise DecodeError(
                f"field '{where}': {len(value)} items, not a multiple of {INTS_PER_WINDOW}"
            )
        if len(value) > MAX_WINDOWS * INTS_PER_WINDOW:
            raise DecodeError(f"field '{where}': more than {MAX_WINDOWS} windows")
        found: list[Window] = []
        number = 0
        for i in range(0, len(value), INTS_PER_WINDOW):
            at = f"{where}[{i // INTS_PER_WINDOW}]"
            step, probes, failures, *rtts = value[i : i + INTS_PER_WINDOW]
            number += _int(step, f"{at}.start", 0 if i == 0 else 1, 2**40)
            probes = _int(probes, f"{at}.probes", 1, MAX_PROBES)
            failures = _int(failures, f"{at}.failures", 0, probes)
            read = [None if r is None else _int(r, f"{at}.rtt", 0, MAX_RTT_US) for r in rtts]
            if any((r is None) != (read[0] is None) for r in read):
                raise DecodeError(f"field '{at}': the RTTs must be all nil or all numbers")
            if failures == probes and read[0] is not None:
                raise DecodeError(f"field '{at}': RTTs of a window without a success")
            p50, p95, top = (None if r is None else r / 1e6 for r in read)
            found.append(Window(float(number * length), probes, failures, p50, p95, top))
        return tuple(found)

    return check


_path_name = f.rule(
    f.string,
    lambda s: len(s) <= MAX_PATH_CHARS and PATH_RE.fullmatch(s),
    f"must be a path like 'node/icmp' (at most {MAX_PATH_CHARS} characters), got {{short}}",
)


def _target(path: PathRollup) -> str:
    return f"{path.cluster}/{path.node}"


PATH_FIELDS = (
    Field("target", f.node_ref, get=_target),
    Field("path", _path_name),
    Field("m10", _windows(MINUTES10_S), get=lambda p: windows_to_ints(p.minutes10, MINUTES10_S)),
    Field("h1", _windows(HOUR_S), get=lambda p: windows_to_ints(p.hours, HOUR_S)),
)


def _path(value: object, where: str) -> PathRollup:
    read = f.read(f.a_map(value, where), PATH_FIELDS, where)
    cluster, _, node = read.pop("target").partition("/")
    return PathRollup(cluster, node, read["path"], read["m10"], read["h1"])


def _paths(value: object, where: str) -> tuple[PathRollup, ...]:
    paths: tuple[PathRollup, ...] = f.list_of(_path, MAX_PATHS, of=object)(value, where)
    names = [(p.cluster, p.node, p.path) for p in paths]
    if names != sorted(set(names)):
        raise DecodeError(f"field '{where}': paths must be sorted by target and path, once each")
    return paths


FIELDS = (
    Field("cluster", f.cluster_name),
    Field("node", f.node_name),
    Field("written_at", f.seconds),
    Field("paths", _paths, get=lambda v: [path_to_wire(p) for p in v.paths]),
)


def path_to_wire(path: PathRollup) -> dict[str, object]:
    return f.write(path, PATH_FIELDS)


def _read(m: Mapping[str, object]) -> NodeRollups:
    read: dict[str, Any] = f.read(m, FIELDS)
    return NodeRollups(**read)


ROLLUP = Codec("roll-ups", _read, lambda v: f.write(v, FIELDS))
encode_rollups, decode_rollups = ROLLUP.encode, ROLLUP.decode


def path_wire_bytes(path: PathRollup) -> int:
    """The bytes `path` takes in an encoded value (exact)."""
    return len(msgpack.packb(path_to_wire(path), use_bin_type=True))


def value_wire_bytes(cluster: str, node: str, paths: int, path_bytes: int) -> int:
    """The bytes of an encoded value of `paths` paths taking `path_bytes` (exact)."""
    empty = ROLLUP.to_wire(NodeRollups(cluster, node, 0.5))  # a float: 9 bytes, like any
    head = len(msgpack.packb(empty, use_bin_type=True)) - 1  # less the empty list
    list_head = 1 if paths < 16 else 3 if paths < 2**16 else 5
    return head + list_head + path_bytes
