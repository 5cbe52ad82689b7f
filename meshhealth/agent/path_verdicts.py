"""Suspicion per own path: ok -> suspect -> unreachable, as the agent applies it.

    verdicts = PathVerdicts(interval_s=10.0, failing_observers=summaries.failing_observers)
    verdicts.observe(path_key, ok=False)            # each probe result (the agent's record)
    verdicts.finish_round(report.targets)           # each round: cluster size, forget left
    verdicts.confirm("lab1", "node3", "lab1/node2") # another observer / an indirect probe
    await nursery.start(verdicts.run)               # settles paths whose time is up
    await verdicts.changed_between_rounds()         # paths whose verdict changed since

The rules are meshhealth.diagnosis.suspicion (pure); this component keeps one
`PathSuspicion` per path this agent probes and applies them with the agent's clock,
with confirmations from other observers and from indirect probes. A verdict that
changes between rounds (a confirmation, the timer) is an event for its one reader
(meshhealth.agent.node_agent).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType

import trio

from meshhealth import defaults
from meshhealth.diagnosis.suspicion import (
    PathSuspicion,
    SuspicionParams,
    confirm,
    observe,
    path_broken,
    suspicion_params,
    suspicion_time_s,
)
from meshhealth.model import PathKey, Reachability, Target

V_SUSPECT = Reachability.SUSPECT
# How many observers (this one included) fail to reach cluster/node now, as the
# cluster's summary says (meshhealth.agent.cluster_view.follower).
FailingObservers = Callable[[str, str], int]


def source_id(cluster: str, node: str) -> str:
    """How a confirming node is named: `cluster/node` (each counts once per run)."""
    return f"{cluster}/{node}"


class PathVerdicts:
    """One suspicion state per own path, the clock of the agent, and a timer."""

    def __init__(
        self,
        *,
        interval_s: float,
        failing_observers: FailingObservers,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.interval_s = interval_s
        self._failing_observers = failing_observers
        self._clock = clock
        self._states: dict[PathKey, PathSuspicion] = {}
        self._cluster_size = 1
        self._multiplier = 1
        self._params = suspicion_params(1, interval_s)
        self._snapshot: Mapping[PathKey, PathSuspicion] | None = None
        self._wake = trio.Event()
        self._timer_due: float | None = None  # when the timer task wakes up next
        self.changes = 0  # verdict changes since start
        self._between_rounds: list[PathKey] = []  # changed by `confirm` or the timer
        self._changed_between_rounds = trio.Event()

    # --- reading -------------------------------------------------------------------

    @property
    def params(self) -> SuspicionParams:
        """The floor, ceiling and thresholds in force (cluster size, local health)."""
        return self._params

    @property
    def possible_confirmers(self) -> int:
        """Other nodes of the probe set that could see a target fail (not us, not it)."""
        return max(0, self._cluster_size - 2)

    def get(self, path: PathKey) -> PathSuspicion | None:
        return self._states.get(path)

    def snapshot(self) -> Mapping[PathKey, PathSuspicion]:
        """Every path's state, read-only; the same object until something changes (the
        status cache compares it by identity)."""
        if self._snapshot is None:
            self._snapshot = MappingProxyType(dict(self._states))
        return self._snapshot

    def counts(self) -> dict[Reachability, int]:
        counts = dict.fromkeys(Reachability, 0)
        for state in self._states.values():
            counts[state.verdict] += 1
        return counts

    def due_at(self, state: PathSuspicion) -> float | None:
        """When a suspect path turns unreachable if nothing else happens (None: not
        before its next failure, or not suspect)."""
        if state.verdict is not Reachability.SUSPECT or state.failing_since is None:
            return None
        if state.failures < self._params.min_failures:
            return None
        wanted = min(self._params.confirmations_wanted, self.possible_confirmers)
        time_s = suspicion_time_s(
            len(state.confirmers), wanted, self._params.floor_s, self._params.ceiling_s
        )
        return state.failing_since + time_s

    def next_due(self) -> float | None:
        """The earliest `due_at` of all paths."""
        times = [t for t in map(self.due_at, self._states.values()) if t is not None]
        return min(times, default=None)

    # --- feeding -------------------------------------------------------------------

    def observe(self, path: PathKey, *, ok: bool, now: float | None = None) -> PathSuspicion:
        """One probe result of `path` (never blocks); returns the path's new state."""
        now = self._clock() if now is None else now
        before = self._states.get(path, PathSuspicion())
        after = observe(
            before,
            ok=ok,
            now=now,
            params=self._params,
            confirmers=() if ok else self._observer_ids(path.cluster, path.node),
            possible_confirmers=self.possible_confirmers,
        )
        self._store({path: after}, {path: before}, notify=False)
        return after

    def confirm(
        self,
        cluster: str,
        node: str,
        source: str,
        *,
        now: float | None = None,
        paths: Iterable[PathKey] | None = None,
    ) -> list[PathKey]:
        """`source` (a `cluster/node`, counted once per failing run) saw `cluster/node`
        fail independently: every suspect path of ours to it (or only `paths`) counts
        one confirmation more and may turn unreachable now. Returns the paths whose
        verdict changed. Ok and unreachable paths are left as they are."""
        now = self._clock() if now is None else now
        chosen = (
            [p for p in self._states if (p.cluster, p.node) == (cluster, node)]
            if paths is None
            else [p for p in paths if p in self._states]
        )
        before = {p: self._states[p] for p in chosen}
        after = {
            p: confirm(
                state,
                now=now,
                params=self._params,
                confirmers=(source,),
                possible_confirmers=self.possible_confirmers,
            )
            for p, state in before.items()
        }
        return self._store(after, before)

    def path_broken(self, path: PathKey, *, now: float | None = None) -> list[PathKey]:
        """A helper reached the target over `path` while ours keeps failing: the path from
        this node is broken (meshhealth.diagnosis.suspicion.path_broken): unreachable now
        when it failed often enough. Returns the paths whose verdict changed."""
        state = self._states.get(path)
        if state is None:
            return []
        now = self._clock() if now is None else now
        return self._store({path: path_broken(state, now=now, params=self._params)}, {path: state})

    def confirm_from_observers(self, now: float | None = None) -> list[PathKey]:
        """The cluster's summary changed: each suspect path counts the other observers
        that fail its target now as confirmations (returns the paths that changed)."""
        changed: list[PathKey] = []
        targets = {(p.cluster, p.node) for p, s in self._states.items() if s.verdict is V_SUSPECT}
        for cluster, node in sorted(targets):
            for source in self._observer_ids(cluster, node):
                changed += self.confirm(cluster, node, source, now=now)
        return changed

    def _observer_ids(self, cluster: str, node: str) -> tuple[str, ...]:
        """Other observers failing cluster/node, as confirmers. The summary gives a count,
        not names: they are `observers:1` .. `observers:n`, each counted once per
        failing run. This agent's own failure may be in the count: one is taken off
        (fewer confirmations, never a false one)."""
        others = self._failing_observers(cluster, node) - 1
        return tuple(f"observers:{i}" for i in range(1, others + 1))

    def finish_round(self, targets: Sequence[Target]) -> list[PathKey]:
        """After a round: the cluster size is the probe set's; paths of nodes that left
        are forgotten (returned)."""
        present = {(t.cluster, t.node) for t in targets}
        gone = [p for p in self._states if (p.cluster, p.node) not in present]
        for path in gone:
            del self._states[path]
        if gone:
            self._snapshot = None
        self._set_params(max(1, len(present)), self._multiplier)
        return gone

    def set_multiplier(self, multiplier: int) -> None:
        """The local health factor (>= 1): an unwell agent waits longer."""
        self._set_params(self._cluster_size, max(1, multiplier))

    def settle(self, now: float | None = None) -> list[PathKey]:
        """Make every suspect path whose time is up unreachable; returns them."""
        now = self._clock() if now is None else now
        before = {
            p: s
            for p, s in self._states.items()
            if (due := self.due_at(s)) is not None and due <= now
        }
        after = {
            p: confirm(
                s, now=now, params=self._params, confirmers=(),
                possible_confirmers=self.possible_confirmers,
            )
            for p, s in before.items()
        }  # fmt: skip
        return self._store(after, before)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The timer: settles each suspect path when its time is up (until cancelled)."""
        task_status.started()
        while True:
            due = self._timer_due = self.next_due()
            # at least a millisecond: a time that is due by a rounding error only is
            # settled on the next turn, never in a busy loop
            wait_s = (
                math.inf
                if due is None
                else max(defaults.SUSPICION_TIMER_MIN_WAIT_S, due - self._clock())
            )
            with trio.move_on_after(wait_s):
                await self._wake.wait()
            self._wake = trio.Event()
            self.settle()

    async def changed_between_rounds(self) -> list[PathKey]:
        """Wait until verdicts changed between rounds (`confirm`, the timer); returns
        the paths changed since the last call (one reader takes them)."""
        while not self._between_rounds:
            await self._changed_between_rounds.wait()
        self._changed_between_rounds = trio.Event()
        changed, self._between_rounds = self._between_rounds, []
        return changed

    # --- inside --------------------------------------------------------------------

    def _set_params(self, cluster_size: int, multiplier: int) -> None:
        if (cluster_size, multiplier) == (self._cluster_size, self._multiplier):
            return
        self._cluster_size, self._multiplier = cluster_size, multiplier
        self._params = suspicion_params(cluster_size, self.interval_s, multiplier=multiplier)
        self._wake.set()  # the due times moved

    def _store(
        self,
        after: Mapping[PathKey, PathSuspicion],
        before: Mapping[PathKey, PathSuspicion],
        *,
        notify: bool = True,
    ) -> list[PathKey]:
        """Keep the new states; report the paths whose verdict changed."""
        changed: list[PathKey] = []
        for path, state in after.items():
            old = before.get(path)
            if old is not None and state == old and path in self._states:
                continue
            self._states[path] = state
            self._snapshot = None
            due = self.due_at(state)
            if due is not None and (self._timer_due is None or due < self._timer_due):
                self._wake.set()  # earlier than the timer's wake-up
            if (old or PathSuspicion()).verdict is not state.verdict:
                changed.append(path)
        if changed:
            self.changes += len(changed)
            if notify:
                self._between_rounds += changed
                self._changed_between_rounds.set()
        return changed
