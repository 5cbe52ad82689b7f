"""The rule behind agent-down (meshhealth.agent.membership.retention): which crashed
nodes stay in view, who stamps and deletes their entries. Pure: tables and hypothesis."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from meshhealth.agent.membership.retention import HeldEntry, decide, is_keeper
from meshhealth.model import Node, RetainedNode, Target

RETENTION_S = 600.0
NOW = 10_000.0


def held(name: str, down_since: float | None = None, rev: int = 7) -> HeldEntry:
    node = Node(name, "c1", f"10.0.0.{int(name[1:])}", "10.1.0.1", (), 4240, "1", 1.0)
    return HeldEntry(RetainedNode(node, down_since), rev)


@pytest.mark.parametrize(
    ("own", "live", "keeper"),
    [
        ("n1", {"n1", "n2"}, True),
        ("n2", {"n1", "n2"}, False),
        ("n2", {"n3"}, True),  # not yet in its own view: still counts itself
        ("n1", set(), True),
    ],
)
def test_the_keeper_is_the_live_node_that_sorts_first(
    own: str, live: set[str], keeper: bool
) -> None:
    assert is_keeper(own, live) is keeper


@pytest.mark.parametrize(
    ("entry", "own", "want"),
    [
        # registered nodes are never agent-down, stamped or deleted
        (held("n2"), "n1", ([], [], [], None)),
        # unregistered, not stamped yet: the keeper stamps, nobody shows it yet
        (held("n3"), "n1", ([], ["n3"], [], None)),
        (held("n3"), "n2", ([], [], [], None)),
        # stamped, within the retention: everyone shows it; expires at since + retention
        (held("n3", NOW - 60), "n2", (["n3"], [], [], NOW - 60 + RETENTION_S)),
        (held("n3", NOW - 60), "n1", (["n3"], [], [], NOW - 60 + RETENTION_S)),
        # stamped and expired: nobody shows it, the keeper deletes it
        (held("n3", NOW - RETENTION_S), "n1", ([], [], ["n3"], None)),
        (held("n3", NOW - RETENTION_S - 1), "n2", ([], [], [], None)),
        # our own entry is never ours to judge
        (held("n1", NOW - 60), "n1", ([], [], [], None)),
    ],
)
def test_decide_table(
    entry: HeldEntry,
    own: str,
    want: tuple[list[str], list[str], list[str], float | None],
) -> None:
    agent_down, stamp, delete, next_at = want
    live = {"n1", "n2"}
    d = decide({entry.entry.node.name: entry}, live, own=own, now=NOW, retention_s=RETENTION_S)
    assert [t.node for t in d.agent_down] == agent_down
    assert list(d.to_stamp) == stamp
    assert list(d.to_delete) == delete
    assert d.next_change_at == next_at


def test_an_agent_down_target_is_probed_on_its_node_ip_only() -> None:
    d = decide({"n3": held("n3", NOW - 5)}, {"n1"}, own="n1", now=NOW, retention_s=RETENTION_S)
    assert d.agent_down == (Target("c1", "n3", "10.0.0.3", None, agent_down_since=NOW - 5),)


def test_retention_zero_keeps_nothing_and_the_keeper_deletes_at_once() -> None:
    entries = {"n3": held("n3"), "n4": held("n4", NOW - 1)}
    d = decide(entries, {"n1"}, own="n1", now=NOW, retention_s=0)
    assert d.agent_down == () and d.to_stamp == ()
    assert d.to_delete == ("n3", "n4")


names = st.sampled_from([f"n{i}" for i in range(1, 9)])


@given(
    entries=st.dictionaries(names, st.none() | st.floats(NOW - 2 * RETENTION_S, NOW)),
    live=st.sets(names),
    own=names,
)
def test_properties(entries: dict[str, float | None], live: set[str], own: str) -> None:
    held_entries = {name: held(name, since) for name, since in entries.items()}
    d = decide(held_entries, live, own=own, now=NOW, retention_s=RETENTION_S)
    shown = {t.node for t in d.agent_down}
    written = set(d.to_stamp) | set(d.to_delete)
    # a registered node, or this one, is never agent-down nor written
    assert not (shown | written) & (live | {own})
    # only the keeper writes; a node is shown or written, never both
    assert not written or is_keeper(own, live)
    assert not shown & written and not set(d.to_stamp) & set(d.to_delete)
    # shown exactly while stamped and younger than the retention
    for name in shown:
        since = entries[name]
        assert since is not None and since + RETENTION_S > NOW
    if d.agent_down:
        assert d.next_change_at == min(
            (t.agent_down_since or 0) + RETENTION_S for t in d.agent_down
        )
    else:
        assert d.next_change_at is None


def test_a_meshed_clusters_entries_are_read_never_written() -> None:
    entries = {"n3": held("n3"), "n4": held("n4", NOW - 5), "n5": held("n5", NOW - RETENTION_S)}
    d = decide(entries, {"n1"}, own=None, now=NOW, retention_s=RETENTION_S)
    assert [t.node for t in d.agent_down] == ["n4"]
    assert d.to_stamp == () and d.to_delete == ()
