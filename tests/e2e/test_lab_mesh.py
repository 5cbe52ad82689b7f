"""Two meshed clusters in one lab, each with its own etcd: every node sees all four.

Each lab has its own prefix and the agents name their endpoint namespaces after their
node's namespace (`<prefix>-lab1-node1-ep`), so this lab never clashes with another.
"""

from __future__ import annotations

import json
import os

import pytest

from tests.e2e.test_lab_stories import _down_and_check, _endpoint_netns, _make

pytestmark = [pytest.mark.netns, pytest.mark.slow]


def test_two_clusters_mesh() -> None:
    prefix = f"mhm{os.getpid() % 100000}"
    mesh = _make(prefix, 2, 2)  # a failed `lab up` removes its half-built lab itself
    endpoints: set[str] = set()
    try:
        endpoints = _endpoint_netns(mesh)
        for observer, target in (
            ("lab1/node1", "lab2/node2"),
            ("lab2/node1", "lab1/node2"),
            ("lab2/node2", "lab1/node1"),
        ):
            mesh.wait_healthy(observer, target)
        doc = mesh.doc("lab1/node1")
        assert doc is not None and doc["summary"]["total"] == 4
        state = json.loads(mesh.plan.state_file.read_text())
        argv = state["processes"]["agent/lab1/node1"]["argv"]
        assert argv[argv.index("--mesh") + 1] == "lab2=http://10.77.255.2:2379"
    finally:
        _down_and_check(mesh, endpoints)
