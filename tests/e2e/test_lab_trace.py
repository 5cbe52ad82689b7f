"""The "which hop" story, end to end: a lab of two racks joined by a router namespace
(`lab up --racks 2 --nodes 4`, real agents), `meshhealth probe --trace` from a node of
rack1 to a node of rack2 (inside the lab, through `lab exec`) sees the router as hop 1
and the target as hop 2; after `lab fault link-drop rack2` the agents see the path time
out and the trace stops after the router, and so does the agent's own trace, quoted in
a finding's evidence; `lab fault clear rack2` brings both back
(root; CI runs this). Removed with `lab down` in the fixture's finally.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest

from meshhealth.lab import plan as P
from meshhealth.lab.build import endpoint_names_taken
from tests.e2e.test_lab_fault_stories import wait_findings
from tests.e2e.test_lab_stories import (
    ALL_OK,
    INTERVAL_S,
    StoryLab,
    _down_and_check,
    _endpoint_netns,
    lab,
)
from tests.plugins.netns import require_root

pytestmark = [pytest.mark.netns, pytest.mark.slow]

NODES = 4
ROUTER = "10.77.0.254"  # the router's address on rack1: node1's gateway
TARGET = "10.77.16.3"  # lab1/node3, in rack2


@pytest.fixture(scope="module")
def story() -> Iterator[StoryLab]:
    require_root()
    prefix = f"mht{os.getpid() % 100000}"
    taken = endpoint_names_taken(P.make_plan(prefix, NODES, racks=2))
    if taken:
        pytest.skip(f"another lab with agents is up ({taken[0]} exists); `lab down` it first")
    done = lab(
        "up", "--prefix", prefix, "--nodes", str(NODES), "--racks", "2",
        "--interval", f"{INTERVAL_S:g}",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "router namespace" in done.stdout
    s = StoryLab(prefix, NODES, 1, racks=2)
    endpoints: set[str] = set()
    try:
        endpoints = _endpoint_netns(s)
        yield s
    finally:
        _down_and_check(s, endpoints)


def trace(story: StoryLab, *extra: str) -> tuple[int, str]:
    done = story.cli("exec", "node1", "--", "meshhealth", "probe", "--trace", TARGET, *extra)
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, done.stdout


def test_trace_between_racks_sees_the_router_then_stops_after_it(story: StoryLab) -> None:
    plan = story.plan
    assert plan.router_netns in plan.netns_names  # (counted by `lab down`)
    assert plan.node("node3").node_ip == TARGET and plan.node("node1").gateway == ROUTER
    # Every path between the racks works (HealthIPs through the router's routes too).
    story.wait_healthy("node1", "lab1/node3")
    story.wait_healthy("node4", "lab1/node2")

    status, out = trace(story, "-o", "json")
    doc = json.loads(out)
    assert status == 0 and doc["reached"] is True
    assert [h["addresses"] for h in doc["hops"]] == [[ROUTER], [TARGET]]
    assert [p["kind"] for p in doc["hops"][0]["probes"]] == ["time-exceeded"] * 3
    assert [p["kind"] for p in doc["hops"][1]["probes"]] == ["reply"] * 3

    done = story.cli("fault", "link-drop", "rack2")
    assert done.returncode == 0, done.stderr
    down = {"host icmp": "timeout"}
    story.wait_paths("node1", "lab1/node3", down)
    story.wait_healthy("node1", "lab1/node2")  # within rack1 all is well

    status, out = trace(story, "--max-hops", "8")
    lines = out.splitlines()
    assert status == 1
    assert lines[1].startswith(f" 1  {ROUTER}  ")
    assert lines[2:] == ["2-8  * * *", f"stops after {ROUTER} (hop 1): no answer from hop 2 on"]
    # node1's agent traced on its own when the path turned unreachable: the finding says
    # where the way stops (diagnosis quotes a failing observer's published trace).
    quoted = f"stops after {ROUTER} (hop 1)"
    found = wait_findings(
        story, lambda f: any(quoted in x["evidence"] for x in f), f"a finding saying {quoted}"
    )
    print("\n".join(f"{x['kind']} {x['nodes']}: {x['evidence']}" for x in found))

    done = story.cli("fault", "clear", "rack2")
    assert done.returncode == 0 and "cleared link-drop on rack2" in done.stdout
    status, out = trace(story)
    assert status == 0 and out.splitlines()[2].startswith(f" 2  {TARGET}  ")
    story.wait_paths("node1", "lab1/node3", ALL_OK)
