"""The chaos soak's invariants (meshhealth/lab/chaos_score.py): what the verdict and the
findings may and must say while faults come and go, and the score table."""

from __future__ import annotations

from meshhealth.lab import faults as F
from meshhealth.lab.chaos_schedule import RESTART_AGENT, ScheduledFault
from meshhealth.lab.chaos_score import (
    CLEARED,
    HEADLINE,
    INVARIANTS,
    NAMED,
    REGISTERED,
    TIMELINE,
    Bounds,
    Event,
    Finding,
    Judge,
    View,
    traceback_exceptions,
)

BOUNDS = Bounds(show_s=20, name_s=30, clear_s=40)
INGRESS = ScheduledFault(F.INGRESS_DROP, 0, 100, ("node2",))
EGRESS = ScheduledFault(F.EGRESS_DROP, 0, 100, ("node3",))
ALL_OK = View({}, [])


def judge() -> Judge:
    return Judge("lab1", 4, BOUNDS)


def down(*nodes: str) -> dict[str, str]:
    return {f"lab1/{n}": "unreachable" for n in nodes}


def finding(kind: str, *nodes: str) -> Finding:
    return Finding(kind, frozenset(f"lab1/{n}" for n in nodes))


def counts(j: Judge, name: str) -> tuple[int, int]:
    return j.tallies[name].checks, j.tallies[name].violations


def test_quiet_cluster_all_reachable() -> None:
    j = judge()
    j.observe(5, [ALL_OK, ALL_OK])
    assert counts(j, HEADLINE) == (2, 0)
    assert j.broken() == []


def test_false_alarm_is_a_headline_violation() -> None:
    j = judge()
    j.observe(5, [View(down("node4"), [])])
    assert counts(j, HEADLINE) == (1, 1)


def test_unreachable_fault_must_show_within_the_bound() -> None:
    j = judge()
    j.fault_on(INGRESS, 10)
    j.observe(15, [ALL_OK])  # not yet: within show_s
    assert counts(j, HEADLINE) == (1, 0)
    j.observe(25, [View(down("node2"), [])])  # shown after 15 s
    assert counts(j, HEADLINE) == (2, 0)
    j.observe(31, [ALL_OK])  # past the bound and not shown: broken
    assert counts(j, HEADLINE) == (3, 1)
    assert j.tallies[HEADLINE].worst == 15


def test_a_fault_that_need_not_show_may_show() -> None:
    j = judge()
    j.fault_on(EGRESS, 0)
    j.observe(50, [ALL_OK, View(down("node3"), [])])
    assert counts(j, HEADLINE) == (2, 0)


def test_named_within_bound_with_exact_culprit() -> None:
    j = judge()
    j.fault_on(INGRESS, 0)
    j.observe(10, [View(down("node2"), [finding("ingress-blocked", "node2")]), ALL_OK])
    assert j.tallies[NAMED].checks == 0  # before the bound nothing is checked
    j.observe(12, [View(down("node2"), [finding("ingress-blocked", "node2")])] * 2)
    assert j.tallies[NAMED].worst == 12
    j.observe(31, [View(down("node2"), [finding("ingress-blocked", "node2", "node1")])])
    j.observe(32, [View(down("node2"), [finding("node-isolated", "node2")])])
    j.observe(33, [View(down("node2"), [finding("ingress-blocked", "node2")])])
    assert counts(j, NAMED) == (3, 2)
    assert j.unnamed() == []


def test_never_named() -> None:
    j = judge()
    j.fault_on(EGRESS, 0)
    j.observe(40, [ALL_OK])
    j.fault_off(EGRESS, 50)
    assert counts(j, NAMED) == (1, 1)
    assert j.unnamed() == ["egress-drop node3 at 0s"]


def test_finding_outliving_its_fault() -> None:
    j = judge()
    j.fault_on(INGRESS, 0)
    j.fault_off(INGRESS, 100)
    lingering = View(down("node2"), [finding("ingress-blocked", "node2")])
    j.observe(130, [lingering])  # within clear_s: fine
    assert counts(j, CLEARED) == (1, 0)
    assert counts(j, HEADLINE) == (1, 0)
    j.observe(141, [lingering])
    assert counts(j, CLEARED) == (2, 1)
    assert counts(j, HEADLINE) == (2, 1)
    j.observe(150, [ALL_OK])
    assert j.tallies[CLEARED].worst == 50
    assert j.tallies[HEADLINE].worst == 50


def test_finding_of_an_unfaulted_node() -> None:
    j = judge()
    j.fault_on(INGRESS, 0)
    j.observe(10, [View(down("node2"), [finding("path", "node1", "node3")])])
    assert counts(j, CLEARED) == (1, 1)


def test_finding_naming_a_bystander_too() -> None:
    j = judge()
    j.fault_on(INGRESS, 0)
    j.observe(10, [View(down("node2"), [finding("path", "node2", "node3")])])
    j.observe(14, [View(down("node2"), [finding("path", "node2", "node3")])])
    assert counts(j, CLEARED) == (2, 0)
    assert list(j.bystanders) == [finding("path", "node2", "node3")]
    assert j.bystander_worst == 4
    j.observe(16, [View(down("node2"), [])])  # gone: the next one counts anew
    j.observe(30, [View(down("node2"), [finding("path", "node2", "node3")])])
    j.observe(32, [View(down("node2"), [finding("path", "node2", "node3")])])
    assert j.bystander_worst == 4


def event(kind: str, node: str, opened: float, closed: float | None) -> Event:
    return Event(kind, frozenset({f"lab1/{node}"}), opened, closed)


def test_timeline_wants_an_event_opened_and_closed_in_time() -> None:
    j = judge()
    j.fault_on(INGRESS, 0)
    j.fault_off(INGRESS, 100)
    j.fault_on(EGRESS, 10)  # never cleared: its event may stay open
    j.fault_off(EGRESS, 200)
    short = ScheduledFault(F.INGRESS_DROP, 150, 160, ("node4",))
    j.fault_on(short, 150)  # on 10 s < name bound: not checked
    j.fault_off(short, 160)
    j.timeline(
        [
            event("ingress-blocked", "node2", 5, 90),
            event("ingress-blocked", "node2", 95, 120),  # flapped, closed 20 s after
            event("egress-blocked", "node3", 25, None),
        ],
        end_s=220,
    )
    assert counts(j, TIMELINE) == (2, 0)
    assert j.tallies[TIMELINE].worst == 15


def test_timeline_misses_late_wrong_and_lingering_events() -> None:
    j = judge()
    j.fault_on(INGRESS, 0)
    j.fault_off(INGRESS, 100)
    j.timeline([event("ingress-blocked", "node2", 31, 110)], end_s=200)  # opened late
    j.timeline([event("node-isolated", "node2", 5, 110)], end_s=200)  # wrong kind
    j.timeline([event("ingress-blocked", "node1", 5, 110)], end_s=200)  # wrong node
    j.timeline([event("ingress-blocked", "node2", 5, None)], end_s=200)  # never closed
    j.timeline([event("ingress-blocked", "node2", 5, 141)], end_s=200)  # closed late
    j.timeline([event("ingress-blocked", "node2", 5, None)], end_s=130)  # not due yet
    assert counts(j, TIMELINE) == (6, 5)
    examples = j.tallies[TIMELINE].examples
    assert examples[0] == "ingress-drop node2 at 0s: no ingress-blocked event opened within 30s"
    assert examples[3] == (
        "ingress-drop node2 at 0s: its event still open 40s after the fault was cleared"
    )


def test_registrations_skip_killed_agents_until_they_had_time() -> None:
    j = judge()
    kill = ScheduledFault(RESTART_AGENT, 0, 5, ("node4",))
    j.fault_on(kill, 0)
    j.fault_off(kill, 5)
    nodes = {"lab1/node1", "lab1/node2", "lab1/node3"}
    j.registrations(10, nodes, {"lab1/node4": 1})
    assert counts(j, REGISTERED) == (3, 0)
    j.registrations(46, nodes, {"lab1/node4": 1})
    assert counts(j, REGISTERED) == (7, 1)
    assert j.tallies[REGISTERED].worst == 45


def test_table_lists_every_invariant() -> None:
    rows = judge().table()
    assert rows[0].split() == ["invariant", "checks", "violations", "worst"]
    assert [r.split()[0] for r in rows[1:]] == list(INVARIANTS)


PLAIN_TRACEBACK = b"""2026-11-27T08:00:00Z info agent: started
Traceback (most recent call last):
  File "/x/agent.py", line 3, in run
    raise
  File "/x/agent.py", line 9, in step
    value = int(text)
            ^^^^^^^^^
ValueError: invalid literal for int() with base 10: 'x'
2026-11-27T08:00:01Z info agent: next
"""

GROUP_TRACEBACK = b"""  + Exception Group Traceback (most recent call last):
  |   File "/x/main.py", line 1, in <module>
  |     trio.run(main)
  | ExceptionGroup: Exceptions from Trio nursery (1 sub-exception)
  +-+---------------- 1 ----------------
    | Traceback (most recent call last):
    |   File "/x/main.py", line 5, in main
    |     await serve()
    | KeyError: 'node'
    +------------------------------------
"""


def test_traceback_exceptions_names_the_raised_line() -> None:
    assert traceback_exceptions(PLAIN_TRACEBACK) == [
        "ValueError: invalid literal for int() with base 10: 'x'"
    ]


def test_traceback_exceptions_reads_an_exception_group_and_its_members() -> None:
    assert traceback_exceptions(GROUP_TRACEBACK) == [
        "ExceptionGroup: Exceptions from Trio nursery (1 sub-exception)",
        "KeyError: 'node'",
    ]


def test_traceback_exceptions_limit_cut_and_no_traceback() -> None:
    assert (
        traceback_exceptions(PLAIN_TRACEBACK * 5, limit=2)
        == ["ValueError: invalid literal for int() with base 10: 'x'"] * 2
    )
    assert traceback_exceptions(b"Traceback (most recent call last):\n  File x\n") == ["(cut off)"]
    assert traceback_exceptions(b"all quiet\n") == []
    long = b"Traceback (most recent call last):\n  File x\nE: " + b"y" * 400 + b"\n"
    assert len(traceback_exceptions(long)[0]) == 160
