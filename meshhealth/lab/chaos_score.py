"""A chaos soak's invariants, scored from what the agents said (pure).

    judge = Judge(cluster="lab1", nodes=16, bounds=Bounds(show_s=45, name_s=60, clear_s=60))
    judge.fault_on(fault, t)                  # as the soak injects and clears
    judge.fault_off(fault, t)
    judge.observe(t, [View(node_states, findings), ...])   # every answering agent
    judge.registrations(t, {"node1", ...})    # the nodes registered in etcd
    print(judge.table())

What the verdict may and must say at time t comes from the faults injected so far
(chaos_schedule.FaultSpec). Each invariant (headline, named, cleared, registered,
timeline; tracebacks, agent-rss and etcd-writes are checked by the caller and counted
here) counts its checks, its violations and a worst figure; docs/performance.md
("Chaos soak") says what each one requires. `traceback_exceptions` names what each
traceback in a log raised, for the report.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from meshhealth.lab import faults as F
from meshhealth.lab.chaos_schedule import ScheduledFault

HEADLINE: Final = "headline"
NAMED: Final = "named"
CLEARED: Final = "cleared"
REGISTERED: Final = "registered"
TIMELINE: Final = "timeline"
TRACEBACKS: Final = "tracebacks"
RSS: Final = "agent-rss"
WRITES: Final = "etcd-writes"
INVARIANTS: Final = (HEADLINE, NAMED, CLEARED, REGISTERED, TIMELINE, TRACEBACKS, RSS, WRITES)
_UNITS: Final = {RSS: "MB", WRITES: "/s", TRACEBACKS: ""}


def traceback_exceptions(log: bytes, *, limit: int = 3) -> list[str]:
    """The exception line ("ValueError: bad") ending each traceback in `log`, at most
    `limit`, each cut to 160 characters; "(cut off)" when the log ends inside one.

    An exception group's tracebacks are drawn with `|` and `+` in front; the line that
    ends a traceback starts in the same column as its "Traceback" line."""
    raised: list[str] = []
    lines = log.decode("utf-8", "replace").splitlines()

    def column(line: str) -> int:
        return len(line) - len(line.lstrip(" |+-"))

    i = 0
    while i < len(lines) and len(raised) < limit:
        line = lines[i]
        i += 1
        if "Traceback (most recent call last)" not in line:
            continue
        start = column(line)
        while i < len(lines) and (not lines[i].strip(" |+-") or column(lines[i]) != start):
            i += 1
        raised.append(lines[i].lstrip(" |+-")[:160] if i < len(lines) else "(cut off)")
        i += 1
    return raised


@dataclass(frozen=True, slots=True)
class Bounds:
    show_s: float  # a fault shows in the verdict within this
    name_s: float  # a fault is named by a finding within this
    clear_s: float  # a fault's traces (verdict, findings, registration) go within this


@dataclass(frozen=True, slots=True)
class Finding:
    kind: str
    nodes: frozenset[str]  # cluster/node


@dataclass(frozen=True, slots=True)
class Event:
    """One event of the findings timeline, its times in the soak's seconds."""

    kind: str
    nodes: frozenset[str]  # cluster/node
    opened_s: float
    closed_s: float | None  # None: still open


@dataclass(frozen=True, slots=True)
class View:
    """What one agent said: its cluster's verdict and the findings."""

    node_states: Mapping[str, str]  # cluster/node -> state, the nodes not reachable
    findings: Sequence[Finding]


@dataclass(slots=True)
class Tally:
    checks: int = 0
    violations: int = 0
    worst: float = 0.0
    examples: list[str] = field(default_factory=list)

    def check(self, ok: bool, why: str = "") -> None:
        self.checks += 1
        if not ok:
            self.violations += 1
            if why and len(self.examples) < 5:
                self.examples.append(why)

    def worse(self, value: float) -> None:
        self.worst = max(self.worst, value)


@dataclass(slots=True)
class _Applied:
    fault: ScheduledFault
    on_s: float
    off_s: float | None = None
    shown_s: float | None = None  # when the verdict first named every culprit
    named_s: float | None = None
    gone_verdict_s: float | None = None  # after off: when the verdict no longer named it
    gone_findings_s: float | None = None


class Judge:
    def __init__(self, cluster: str, nodes: int, bounds: Bounds) -> None:
        self.cluster = cluster
        self.nodes = nodes
        self.bounds = bounds
        self.tallies = {name: Tally() for name in INVARIANTS}
        self._applied: list[_Applied] = []
        # Findings that name a faulted node and a bystander too (a fault's onset seen by
        # some observers first): first seen; not a violation, reported apart.
        self.bystanders: dict[Finding, float] = {}  # first seen
        self._bystander_since: dict[Finding, float] = {}  # seen without a break since
        self.bystander_worst = 0.0

    # --- faults -----------------------------------------------------------------------

    def culprits(self, fault: ScheduledFault) -> frozenset[str]:
        return frozenset(f"{self.cluster}/{n}" for n in fault.nodes)

    def fault_on(self, fault: ScheduledFault, t: float) -> None:
        self._applied.append(_Applied(fault, t))

    def fault_off(self, fault: ScheduledFault, t: float) -> None:
        for a in self._applied:
            if a.fault == fault and a.off_s is None:
                a.off_s = t

    def _lingering(self, a: _Applied, t: float) -> bool:
        return a.on_s <= t and (a.off_s is None or t < a.off_s + self.bounds.clear_s)

    def may_name(self, t: float) -> frozenset[str]:
        """Nodes the verdict and findings may name at t."""
        return frozenset(
            n for a in self._applied if self._lingering(a, t) for n in self.culprits(a.fault)
        )

    def must_name(self, t: float) -> frozenset[str]:
        """Nodes the verdict must count not reachable at t."""
        return frozenset(
            n
            for a in self._applied
            if a.fault.spec.unreachable and a.off_s is None and a.on_s + self.bounds.show_s <= t
            for n in self.culprits(a.fault)
        )

    def _active(self, t: float) -> list[_Applied]:
        return [a for a in self._applied if a.on_s <= t and a.off_s is None]

    # --- what the agents said -----------------------------------------------------------

    def observe(self, t: float, views: Sequence[View]) -> None:
        if not views:
            return
        may, must = self.may_name(t), self.must_name(t)
        head, named, cleared = (self.tallies[k] for k in (HEADLINE, NAMED, CLEARED))
        seen: set[Finding] = set()
        for view in views:
            said = {n for n, state in view.node_states.items() if n.startswith(f"{self.cluster}/")}
            extra, missing = said - may, must - said
            head.check(
                not extra and not missing,
                f"t={t:.0f}s verdict names {sorted(said)}; may {sorted(may)}, must {sorted(must)}",
            )
            for finding in view.findings:
                if not finding.nodes & {f"{self.cluster}/{n}" for n in self._all_nodes()}:
                    continue  # another cluster's
                cleared.check(
                    bool(finding.nodes & may),
                    f"t={t:.0f}s finding {finding.kind} {sorted(finding.nodes)} explained by no "
                    f"fault (may name {sorted(may)})",
                )
                if finding.nodes & may and finding.nodes - may:
                    seen.add(finding)
                    first = self._bystander_since.setdefault(finding, t)
                    self.bystanders.setdefault(finding, t)
                    self.bystander_worst = max(self.bystander_worst, t - first)
        for gone in set(self._bystander_since) - seen:
            del self._bystander_since[gone]
        for a in self._active(t):
            spec = a.fault.spec
            culprits = self.culprits(a.fault)
            everywhere = all(self._names(v, a.fault) for v in views)
            if a.named_s is None and spec.findings and everywhere:
                a.named_s = t
                named.worse(t - a.on_s)
            if spec.findings and t >= a.on_s + self.bounds.name_s:
                for view in views:
                    named.check(
                        self._names(view, a.fault),
                        f"t={t:.0f}s {a.fault.label} (on at {a.on_s:.0f}s) not named "
                        f"{'/'.join(spec.findings)} {sorted(culprits)}; findings "
                        f"{[(f.kind, sorted(f.nodes)) for f in view.findings]}",
                    )
            shown = all(culprits <= set(v.node_states) for v in views)
            if a.shown_s is None and spec.unreachable and shown:
                a.shown_s = t
                head.worse(t - a.on_s)
        for a in self._applied:
            if a.off_s is None or t < a.off_s:
                continue
            culprits = self.culprits(a.fault)
            held = self._held_by_others(a, t)
            if a.gone_verdict_s is None and all(
                not (culprits - held) & set(v.node_states) for v in views
            ):
                a.gone_verdict_s = t
                head.worse(t - a.off_s)
            if a.gone_findings_s is None and all(
                not any(f.nodes & (culprits - held) for f in v.findings) for v in views
            ):
                a.gone_findings_s = t
                cleared.worse(t - a.off_s)

    def _all_nodes(self) -> list[str]:
        return [f"node{i}" for i in range(1, self.nodes + 1)]

    def _held_by_others(self, a: _Applied, t: float) -> frozenset[str]:
        return frozenset(
            n
            for b in self._applied
            if b is not a and b.on_s <= t and (b.off_s is None or t < b.off_s)
            for n in self.culprits(b.fault)
        )

    def _names(self, view: View, fault: ScheduledFault) -> bool:
        culprits = self.culprits(fault)
        return any(f.kind in fault.spec.findings and f.nodes == culprits for f in view.findings)

    # --- the rest ---------------------------------------------------------------------

    def agent_expected_up(self, t: float) -> frozenset[str]:
        """Nodes whose agent runs and had `clear_s` to register (cluster/node)."""
        down = {
            n
            for a in self._applied
            if a.fault.spec.lab_kind == F.KILL_AGENT and self._lingering(a, t)
            for n in self.culprits(a.fault)
        }
        return frozenset(f"{self.cluster}/{n}" for n in self._all_nodes()) - down

    def registrations(
        self, t: float, registered: Iterable[str], since: Mapping[str, float]
    ) -> None:
        """`registered`: cluster/node names in etcd; `since`: when each missing node was
        first seen missing (the caller keeps it) for the worst time."""
        have = set(registered)
        tally = self.tallies[REGISTERED]
        for node in sorted(self.agent_expected_up(t)):
            tally.check(node in have, f"t={t:.0f}s {node} not registered")
            if node not in have and node in since:
                tally.worse(t - since[node])

    def table(self) -> list[str]:
        rows = [f"{'invariant':<12} {'checks':>7} {'violations':>10} {'worst':>10}"]
        for name in INVARIANTS:
            t = self.tallies[name]
            unit = _UNITS.get(name, "s")
            worst = "-" if name == TRACEBACKS else f"{t.worst:.1f}{unit}"
            rows.append(f"{name:<12} {t.checks:>7} {t.violations:>10} {worst:>10}")
        return rows

    def broken(self) -> list[str]:
        return [name for name in INVARIANTS if self.tallies[name].violations]

    def timeline(self, events: Sequence[Event], end_s: float) -> None:
        """`timeline`: each fault that had to be named (on for `name_s` before `end_s`)
        has its event, opened in time and closed in time (see the module docstring)."""
        tally = self.tallies[TIMELINE]
        for a in self._applied:
            spec = a.fault.spec
            off = a.off_s if a.off_s is not None else end_s
            if not spec.findings or off - a.on_s < self.bounds.name_s:
                continue
            culprits = self.culprits(a.fault)
            during = [
                e
                for e in events
                if e.kind in spec.findings and e.nodes == culprits and a.on_s <= e.opened_s <= off
            ]
            first = min((e.opened_s for e in during), default=None)
            if first is None or first > a.on_s + self.bounds.name_s:
                tally.check(
                    False,
                    f"{a.fault.label} at {a.on_s:.0f}s: no {'/'.join(spec.findings)} event "
                    f"opened within {self.bounds.name_s:g}s",
                )
                continue
            tally.worse(first - a.on_s)
            due = None if a.off_s is None else a.off_s + self.bounds.clear_s
            if due is None or due > end_s:
                tally.check(True)
                continue
            late = [e for e in during if e.closed_s is None or e.closed_s > due]
            tally.check(
                not late,
                f"{a.fault.label} at {a.on_s:.0f}s: its event still open "
                f"{self.bounds.clear_s:g}s after the fault was cleared",
            )

    def unnamed(self) -> list[str]:
        """Faults that needed a finding and never got one in every view."""
        return [
            f"{a.fault.label} at {a.on_s:.0f}s"
            for a in self._applied
            if a.fault.spec.findings and a.named_s is None
        ]
