"""Which crashed nodes stay in view as agent-down, and who writes what (pure, no I/O).

A registered node also has a retained entry without a lease
(`state/retained/v1/<cluster>/<node>`, see meshhealth.agent.membership.registrar). A
clean leave deletes it with the lease; a crash leaves it behind when the lease expires.
For each retained entry whose node is no longer registered:

1. `down_since` unset: the *keeper* (the live node of the cluster whose name sorts
   first, so one agent writes, not N) stamps it with the time it noticed, in a
   transaction that checks the node is still unregistered;
2. stamped and younger than the retention time: every agent keeps the node in view as
   agent-down (`Target.agent_down_since`): its NodeIP is still probed, its health
   endpoint (gone with its agent) is not;
3. stamped and older: the node leaves every view; the keeper deletes the entry.

A retention time of 0 keeps nothing: the keeper deletes such entries at once.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass

from meshhealth.model import RetainedNode, Target


@dataclass(frozen=True, slots=True)
class HeldEntry:
    """One retained entry as read from etcd."""

    entry: RetainedNode
    mod_revision: int


@dataclass(frozen=True, slots=True)
class RetentionDecision:
    agent_down: tuple[Target, ...]  # kept in view, sorted by node name
    to_stamp: tuple[str, ...]  # node names whose `down_since` this agent writes now
    to_delete: tuple[str, ...]  # node names whose entry this agent deletes now
    next_change_at: float | None  # unix seconds of the next expiry among agent_down


def is_keeper(own: str, live: Set[str]) -> bool:
    """Whether this agent writes the stamps and deletions: its name sorts first among
    the live nodes of its cluster (itself included)."""
    return all(own <= name for name in live)


def decide(
    held: Mapping[str, HeldEntry],
    live: Set[str],
    *,
    own: str | None,
    now: float,
    retention_s: float,
) -> RetentionDecision:
    """What to show and what to write, from the retained entries of one cluster (by
    node name), the names of its registered nodes and the time. `own` is this agent's
    name in that cluster; None for a meshed cluster's, which it only reads."""
    keeper = own is not None and is_keeper(own, live)
    agent_down: list[Target] = []
    to_stamp: list[str] = []
    to_delete: list[str] = []
    next_change_at: float | None = None
    for name in sorted(held):
        if name in live or name == own:
            continue  # registered (a new registration clears the stamp)
        entry = held[name].entry
        since = entry.down_since
        if since is None:
            if keeper:
                (to_stamp if retention_s > 0 else to_delete).append(name)
            continue
        expires_at = since + retention_s
        if now >= expires_at:
            if keeper:
                to_delete.append(name)
            continue
        node = entry.node
        agent_down.append(
            Target(
                node.cluster,
                node.name,
                node.node_ip,
                node_ip_secondary=node.node_ip_secondary,
                agent_down_since=since,
            )
        )
        next_change_at = expires_at if next_change_at is None else min(next_change_at, expires_at)
    return RetentionDecision(tuple(agent_down), tuple(to_stamp), tuple(to_delete), next_change_at)
