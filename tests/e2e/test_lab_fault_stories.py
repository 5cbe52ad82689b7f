"""One story per lab fault: a real 5-node lab, the fault, and the finding
`meshhealth diagnose -o json` (run inside the lab, against the lab's etcd) names, with
the headline (`Cluster health` of node1's `status -o json` and its text) and node1's
metrics agreeing with it; then `lab fault clear`, the finding goes away and the
headline returns to 5/5 (root; CI runs these).

Findings take a probe interval + timeout (+ the agents' suspicion time) to show: every
wait polls with a generous deadline. The lab is shared by the tests of this module and
removed with `lab down` in the fixture's finally.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from meshhealth import defaults
from tests.e2e.test_lab_stories import StoryLab, _down_and_check, _endpoint_netns, _make

pytestmark = [pytest.mark.netns, pytest.mark.slow]

# interval (1.5 s) + probe timeout + suspicion, many times over for a loaded CI box
FINDING_S = 90.0

Finding = dict[str, Any]


@pytest.fixture(scope="module")
def story() -> Iterator[StoryLab]:
    prefix = f"mhf{os.getpid() % 100000}"
    s = _make(prefix, 5, 1)
    endpoints: set[str] = set()
    try:
        endpoints = _endpoint_netns(s)
        yield s
    finally:
        _down_and_check(s, endpoints)


def findings(story: StoryLab) -> list[Finding] | None:
    """`meshhealth diagnose -o json` on node1 (its cluster's etcd); None on errors."""
    done = story.cli("exec", "node1", "--", "meshhealth", "diagnose", "-o", "json")
    if done.returncode not in (0, 1):
        return None
    found: list[Finding] = json.loads(done.stdout)["findings"]
    assert (done.returncode == 1) == bool(found)  # exit 1 exactly when there are findings
    return found


def wait_findings(
    story: StoryLab, ok: Any, what: str, timeout_s: float = FINDING_S
) -> list[Finding]:
    deadline = time.monotonic() + timeout_s
    seen: list[Finding] | None = None
    while time.monotonic() < deadline:
        seen = findings(story)
        if seen is not None and ok(seen):
            return seen
        time.sleep(0.5)
    pytest.fail(f"never {what} within {timeout_s:g}s; last findings: {seen}")


def healthy(story: StoryLab, timeout_s: float = FINDING_S) -> None:
    wait_findings(story, lambda f: f == [], "no findings", timeout_s)


def top_is(kinds: tuple[str, ...], nodes: list[str], evidence: str = "") -> Any:
    return lambda f: (
        bool(f)
        and f[0]["kind"] in kinds
        and f[0]["nodes"] == nodes
        and re.search(evidence, f[0]["evidence"]) is not None
    )


def own_status(story: StoryLab, node: str) -> dict[str, Any] | None:
    """`meshhealth status -o json` run on `node` (its own agent); None on errors."""
    done = story.cli("exec", node, "--", "meshhealth", "status", "-o", "json")
    if done.returncode != 0:
        return None
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


def headline(story: StoryLab, node: str = "node1") -> dict[str, Any] | None:
    """The cluster verdict `node` shows (its aggregator's summary); None before one."""
    doc = own_status(story, node)
    for verdict in (doc or {}).get("cluster_health") or []:
        if verdict["source"] == "summary" and verdict["cluster"] == "lab1":
            found: dict[str, Any] = verdict
            return found
    return None


_SCRAPE = (
    "import sys, urllib.request as u; sys.stdout.write(u.urlopen(sys.argv[1]).read().decode())"
)


def exported(story: StoryLab, node: str = "node1") -> tuple[set[str], dict[str, str]] | None:
    """What `node`'s /metrics says of the verdict: the unreachable nodes
    (meshhealth_cluster_node_state) and the discounted observers with their reasons."""
    url = f"http://{story.plan.node(node).metrics_listen}/metrics"
    done = story.cli("exec", node, "--", sys.executable, "-c", _SCRAPE, url)
    if done.returncode != 0:
        return None
    unreachable = set(
        re.findall(
            r'^meshhealth_cluster_node_state\{cluster="lab1",node="([^"]+)",'
            r'state="unreachable"\} 1$',
            done.stdout,
            re.M,
        )
    )
    discounted = {
        f"lab1/{node}": reason
        for node, reason in re.findall(
            r'^meshhealth_discounted_observer\{source_cluster="lab1",source_node="([^"]+)",'
            r'reason="([^"]+)"\} 1$',
            done.stdout,
            re.M,
        )
    }
    return unreachable, discounted


def verdict_disagrees(
    story: StoryLab, unreachable: set[str], discounted: Mapping[str, str | None]
) -> str | None:
    """Why node1's headline or metrics do not (yet) say: `unreachable` are the nodes
    the verdict finds unreachable (every other one reachable), `discounted` the
    observers it leaves out (a reason of None: may be left out, or not); None: they do."""
    verdict = headline(story)
    if verdict is None:
        return "no cluster summary on node1"
    states = {n: s for n, s in verdict["node_states"].items()}
    left_out = {d["node"]: d["reason"] for d in verdict["discounted_observers"]}
    total = verdict["total"]

    def discount_ok(seen: Mapping[str, str]) -> bool:
        must = {n: r for n, r in discounted.items() if r is not None}
        return all(seen.get(n) == r for n, r in must.items()) and set(seen) <= set(discounted)

    if total != 5 or verdict["reachable"] != 5 - len(unreachable):
        return f"headline {verdict['reachable']}/{total}, states {states}"
    if states != dict.fromkeys(unreachable, "unreachable"):
        return f"node states {states}"
    if not discount_ok(left_out):
        return f"discounted {left_out}"
    metrics = exported(story)
    if metrics is None:
        return "no metrics from node1"
    if metrics[0] != unreachable or not discount_ok(metrics[1]):
        return f"metrics say unreachable {metrics[0]}, discounted {metrics[1]}"
    return None


def wait_verdict(
    story: StoryLab,
    unreachable: set[str],
    discounted: Mapping[str, str | None],
    what: str,
    timeout_s: float = FINDING_S,
) -> float:
    """Poll until node1's headline and metrics agree with the expectation; seconds taken."""
    started = time.monotonic()
    why: str | None = "not asked yet"
    while time.monotonic() < started + timeout_s:
        why = verdict_disagrees(story, unreachable, discounted)
        if why is None:
            return time.monotonic() - started
        time.sleep(0.5)
    pytest.fail(f"the headline never said {what} within {timeout_s:g}s: {why}")


def story_of(
    story: StoryLab,
    fault: list[str],
    kinds: tuple[str, ...],
    nodes: list[str],
    *,
    evidence: str = "",
    clear_s: float = FINDING_S,
    unreachable: tuple[str, ...] = (),
    discounted: Mapping[str, str | None] | None = None,
    headline_text: str = "",
) -> Finding:
    """Inject `fault`, wait until the top finding is one of `kinds` naming `nodes` (and,
    when given, with evidence matching the regex `evidence`) while node1's headline and
    metrics find exactly `unreachable` unreachable and leave out the `discounted`
    observers (and its status text says `headline_text`); clear the fault, wait until
    no finding names those nodes and the headline is back to 5/5; the finding seen."""
    healthy(story)
    wait_verdict(story, set(), {}, "5/5 before the fault")
    done = story.cli("fault", *fault)
    assert done.returncode == 0, done.stderr
    try:
        top = wait_findings(
            story, top_is(kinds, nodes, evidence), f"{kinds} on {nodes} ({evidence!r})"
        )[0]
        wait_verdict(
            story, set(unreachable), discounted or {}, f"{sorted(unreachable)} unreachable"
        )
        if headline_text:
            text = story.cli("exec", "node1", "--", "meshhealth", "status").stdout
            assert headline_text in text, text
        assert top_is(kinds, nodes, evidence)(findings(story) or [])  # still the same
    finally:
        cleared = story.cli("fault", "clear")
        assert cleared.returncode == 0, cleared.stderr
    wait_findings(story, lambda f: all(x["nodes"] != nodes for x in f), f"{nodes} cleared", clear_s)
    back_s = wait_verdict(story, set(), {}, "5/5 after the fault", clear_s)
    print(f"\n{' '.join(fault)}: headline 5/5 again {back_s:.1f}s after the finding went")
    assert 0 < top["confidence"] <= 1 and top["evidence"]
    return top


def test_egress_drop_is_egress_blocked(story: StoryLab) -> None:
    # Every probe node2 sends is lost. Its local health then marks its own report
    # degraded for `targets-failing` alone (its loop does not lag), while the others
    # reach it: diagnosis reads that as its egress, on its own report's failures. The
    # finding may come while one path is still suspect: 3 or 4 of the 4.
    story_of(
        story,
        ["egress-drop", "node2"],
        ("egress-blocked",),
        ["lab1/node2"],
        evidence=r"its own probes fail to [34] of 4 targets",
        discounted={"lab1/node2": "egress-blocked"},
        headline_text="5/5 reachable (4 observers each); lab1/node2 cannot reach out",
    )


def test_ingress_drop_is_ingress_blocked(story: StoryLab) -> None:
    # The first finding may be taken while only some observers' reports show the fault
    # ("from 2 of 2 observers"): wait until at least 3 of the 4 observers' do.
    story_of(
        story,
        ["ingress-drop", "node3"],
        ("ingress-blocked",),
        ["lab1/node3"],
        evidence=r"from [34] of 4 observers",
        unreachable=("lab1/node3",),
        discounted={"lab1/node3": None},  # its own probes fail too: degraded, in time
    )


def test_path_drop_is_one_path(story: StoryLab) -> None:
    # node4 is reached by 3 of its 4 observers: reachable; the path is the finding
    story_of(story, ["path-drop", "node1", "node4"], ("path",), ["lab1/node1", "lab1/node4"])


def test_partition_of_two_groups(story: StoryLab) -> None:
    top = story_of(
        story,
        ["partition", "node1,node2"],
        ("partition",),
        ["lab1/node1", "lab1/node2"],
        unreachable=("lab1/node1", "lab1/node2"),
        discounted={"lab1/node1": "partition", "lab1/node2": "partition"},
    )
    assert sorted(map(sorted, top["groups"])) == [
        ["lab1/node1", "lab1/node2"],
        ["lab1/node3", "lab1/node4", "lab1/node5"],
    ]


def test_partition_of_one_node_is_node_isolated(story: StoryLab) -> None:
    story_of(
        story,
        ["partition", "node5"],
        ("node-isolated",),
        ["lab1/node5"],
        unreachable=("lab1/node5",),
        discounted={"lab1/node5": "node-isolated"},
        headline_text="4/5 reachable (4 observers each), 1 unreachable; lab1/node5 is cut off",
    )


def test_endpoint_forward_drop_is_endpoint_down(story: StoryLab) -> None:
    story_of(
        story,
        ["endpoint-forward-drop", "node2"],
        ("endpoint-down",),
        ["lab1/node2"],
        unreachable=("lab1/node2",),
    )


def test_kill_agent_is_agent_down(story: StoryLab) -> None:
    # `clear` starts a new agent; it registers once its predecessor's entry expired.
    story_of(
        story, ["kill-agent", "node4"], ("agent-down",), ["lab1/node4"],
        clear_s=defaults.LEASE_TTL_S + FINDING_S,
        unreachable=("lab1/node4",), discounted={"lab1/node4": None},
    )  # fmt: skip


def test_kill_agent_and_a_path_drop_at_once(story: StoryLab) -> None:
    """Two faults at once: node2's agent is killed and node4's path to node5 drops
    everything. Both are named; node5, which 3 of its 4 observers reach, stays reachable
    (a dead observer's last report, or one broken path, never sinks a healthy node)."""
    healthy(story)
    wait_verdict(story, set(), {}, "5/5 before the faults")
    for fault in (["kill-agent", "node2"], ["path-drop", "node4", "node5"]):
        done = story.cli("fault", *fault)
        assert done.returncode == 0, done.stderr
    try:

        def both(f: list[Finding]) -> bool:
            named = {(x["kind"], tuple(x["nodes"])) for x in f}
            return {("agent-down", ("lab1/node2",)), ("path", ("lab1/node4", "lab1/node5"))} <= (
                named
            )

        wait_findings(story, both, "agent-down lab1/node2 and path lab1/node4 -> lab1/node5")
        wait_verdict(story, {"lab1/node2"}, {"lab1/node2": None}, "only node2 unreachable")
    finally:
        cleared = story.cli("fault", "clear")
        assert cleared.returncode == 0, cleared.stderr
    clear_s = defaults.LEASE_TTL_S + FINDING_S
    healthy(story, clear_s)
    wait_verdict(story, set(), {}, "5/5 after the faults", clear_s)


def agent_state(story: StoryLab, node: str) -> str:
    """The agent's scheduler state (R, S, T...) from /proc, by its recorded PID."""
    state = json.loads(story.plan.state_file.read_text())
    pid = state["processes"][f"agent/{node}"]["pid"]
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def lagging(doc: dict[str, Any] | None) -> bool:
    health = (doc or {}).get("local_health") or {}
    return bool(health.get("degraded")) and "loop-lag" in health.get("reason_codes", [])


def test_starve_names_the_starved_node(story: StoryLab) -> None:
    """A starved agent (SIGSTOPped 3 s of every 4 s): its own `status -o json` says it
    is degraded for `loop-lag`, and diagnosis names it observer-degraded (its agent
    answers late or not at all and its report says its loop lags); no finding, on any
    poll, is against another node (every one names the starved node first)."""
    healthy(story)
    assert story.cli("fault", "starve", "node3").returncode == 0
    against_others: list[Finding] = []
    try:
        deadline = time.monotonic() + FINDING_S
        while agent_state(story, "lab1/node3") != "T" and time.monotonic() < deadline:
            time.sleep(0.1)
        assert agent_state(story, "lab1/node3") == "T"  # SIGSTOPped now and then
        doc = own_status(story, "node3")
        while not lagging(doc) and time.monotonic() < deadline:
            time.sleep(0.5)
            doc = own_status(story, "node3")
        assert doc is not None and lagging(doc), doc and doc.get("local_health")

        def named(f: list[Finding]) -> bool:
            against_others.extend(x for x in f if x["nodes"][0] != "lab1/node3")
            return top_is(("observer-degraded",), ["lab1/node3"], r"loop-lag")(f)

        wait_findings(story, named, "the starved node named observer-degraded")
        # The headline never holds another node against the starved one's failures.
        verdict = headline(story)
        assert verdict is not None
        assert set(verdict["node_states"]) <= {"lab1/node3"}, verdict
    finally:
        cleared = story.cli("fault", "clear")
    assert cleared.returncode == 0 and "agent of lab1/node3 runs freely again" in cleared.stdout
    assert not against_others, against_others
    assert "starve/" not in story.cli("status").stdout
    assert agent_state(story, "lab1/node3") != "T"
    healthy(story)
    wait_verdict(story, set(), {}, "5/5 after the starved agent runs freely")


def test_udp_drop_is_udp_blocked(story: StoryLab) -> None:
    """UDP to port 4240 arriving at node2 is dropped: the agents' UDP echo to node2 times
    out while ICMP and HTTP to it pass, so node2 stays reachable (5/5)."""
    top = story_of(story, ["udp-drop", "node2"], ("udp-blocked",), ["lab1/node2"])
    assert "UDP echoes to it are lost" in top["evidence"]


def test_udp_drop_shows_in_status(story: StoryLab) -> None:
    """node1's own status during a udp-drop on node2: `UDP to agent` timed out, ICMP and
    HTTP OK, the node reachable; and the UDP path back after `fault clear`."""
    healthy(story)
    assert story.cli("fault", "udp-drop", "node2").returncode == 0
    try:
        deadline = time.monotonic() + FINDING_S
        node2: dict[str, Any] = {}
        while time.monotonic() < deadline:
            doc = own_status(story, "node1") or {"nodes": []}
            node2 = next((n for n in doc["nodes"] if n["name"] == "node2"), {})
            udp = node2.get("host", {}).get("primary_address", {}).get("udp", {})
            if udp.get("status") == "timeout":
                break
            time.sleep(0.5)
        host = node2["host"]["primary_address"]
        assert host["udp"]["status"] == "timeout", host
        assert host["icmp"]["status"] == host["http"]["status"] == "ok"
        assert node2["state"] == "reachable"
        text = story.cli("exec", "node1", "--", "meshhealth", "status").stdout
        assert re.search(r"UDP to agent:\s+Connection timed out", text), text
    finally:
        assert story.cli("fault", "clear").returncode == 0
    healthy(story)


def test_mtu_is_mtu_blackhole(story: StoryLab) -> None:
    """Packets over 1400 bytes to and from node2 are lost: the agents' big don't-fragment
    probe (the link MTU, 1500) fails while the small ones pass."""
    top = story_of(story, ["mtu", "node2", "1400"], ("mtu-blackhole",), ["lab1/node2"])
    assert "small ICMP passes but big don't-fragment ICMP is lost" in top["evidence"]
