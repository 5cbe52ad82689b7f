"""meshhealth.documents.matrix: cells, staleness and the whose-fault-is-it summary lines (pure)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from meshhealth.documents.coverage import Coverage, coverage
from meshhealth.documents.matrix import build_matrix, cell_state, is_stale
from meshhealth.documents.matrix_json import matrix_document
from meshhealth.model import HealthReport, PlanInfo, ProbeStatus
from tests import matrix_stories as S


def _states(reports: list, **kwargs: object) -> dict[tuple[str, str], str]:
    matrix = build_matrix(reports, now=S.NOW, **kwargs)  # type: ignore[arg-type]
    return {
        (f"{row.source[0]}/{row.source[1]}", f"{cell.target[0]}/{cell.target[1]}"): cell.state
        for row in matrix.rows
        for cell in row.cells
    }


@pytest.mark.parametrize(
    ("statuses", "expected"),
    [
        ((S.OK,) * 4, "reachable"),
        ((S.OK, S.OK, S.TIMEOUT, S.OK), "unreachable"),
        ((S.TIMEOUT,) * 4, "unreachable"),
        ((S.OK, S.OK), "reachable"),  # no endpoint
        ((ProbeStatus.UNKNOWN,) * 2, "unknown"),
        ((S.OK, ProbeStatus.UNKNOWN), "reachable"),  # not probed yet does not count
        ((), "unknown"),
    ],
)
def test_cell_state(statuses: tuple[ProbeStatus, ...], expected: str) -> None:
    assert cell_state(S.paths(statuses)) == expected


@pytest.mark.parametrize(
    ("age_s", "interval_s", "stale"),
    [(2.0, 10.0, False), (94.9, 10.0, False), (95.0, 10.0, False), (95.1, 10.0, True),
     (67.9, 1.0, False), (68.1, 1.0, True),  # the refresh dominates short intervals
     (484.9, 120.0, False), (485.1, 120.0, True)],  # a long interval refreshes every round
)  # fmt: skip
def test_stale_after_the_refresh_and_a_margin(age_s: float, interval_s: float, stale: bool) -> None:
    """refresh (60 s, or the interval when longer) + 3 intervals + 5 s."""
    report = S.report("c/a", {}, age_s=age_s, interval_s=interval_s)
    assert is_stale(report, S.NOW) is stale


def test_healthy_cluster() -> None:
    matrix = build_matrix(S.healthy(), now=S.NOW)
    assert [f"{c}/{n}" for c, n in matrix.columns] == list(S.NODES3)
    assert matrix.counts() == {
        "reachable": 9,
        "unreachable": 0,
        "suspect": 0,
        "stale": 0,
        "unassigned": 0,
        "unknown": 0,
    }
    assert matrix.lines == ()
    assert matrix.rows[0].cells[1].rtt_s == 0.0005


def test_a_node_nobody_reaches() -> None:
    matrix = build_matrix(S.node_unreachable_by_all(), now=S.NOW)
    assert matrix.lines == (
        "lab1/node3 is unreachable from every other node: look at lab1/node3 or its link",
        "lab1/node3 reaches no one: look at lab1/node3's own network",
    )


def test_a_node_that_reaches_no_one() -> None:
    down = S.paths((S.TIMEOUT,) * 4)
    reports = [
        S.report("lab1/node1", {t: S.paths() for t in S.NODES3}),
        S.report("lab1/node2", {"lab1/node1": down, "lab1/node2": S.paths(), "lab1/node3": down}),
        S.report("lab1/node3", {t: S.paths() for t in S.NODES3}),
    ]
    # node2 alone cannot reach the others, who reach everyone: node2's own network.
    assert build_matrix(reports, now=S.NOW).lines == (
        "lab1/node2 reaches no one: look at lab1/node2's own network",
    )


def test_an_endpoint_nobody_reaches_points_at_its_node() -> None:
    assert build_matrix(S.endpoint_forward_drop(), now=S.NOW).lines == (
        "lab1/node2 is unreachable from every other node: look at lab1/node2 or its link",
    )


def test_everyone_failing_is_a_cluster_wide_problem() -> None:
    """Every endpoint unreachable from every other node (no routes to the pod CIDRs, the
    lab without --route-cidrs): not node after node's fault."""
    nodes = ("c/a", "c/b", "c/c", "c/d")
    bad = S.paths((S.OK, S.OK, S.TIMEOUT, S.TIMEOUT))
    reports = [S.report(s, {t: S.paths() if t == s else bad for t in nodes}) for s in nodes]
    assert build_matrix(reports, now=S.NOW).lines == (
        "4 of 4 nodes reach no other node: a cluster-wide problem (fabric, routes, firewall "
        "policy), not one node's",
    )
    # two of four targets unreachable from all others (and themselves fine): still per node
    down = S.paths((S.TIMEOUT,) * 4)
    reports = [
        S.report(s, {t: down if t in ("c/c", "c/d") and t != s else S.paths() for t in nodes})
        for s in nodes
    ]
    assert build_matrix(reports, now=S.NOW).lines == (
        "c/c is unreachable from every other node: look at c/c or its link",
        "c/d is unreachable from every other node: look at c/d or its link",
    )


def test_two_nodes_are_too_few_to_blame_one() -> None:
    down = S.paths((S.TIMEOUT,) * 4)
    reports = [
        S.report("c/a", {"c/a": S.paths(), "c/b": down}),
        S.report("c/b", {"c/a": down, "c/b": S.paths()}),
    ]
    assert build_matrix(reports, now=S.NOW).lines == ()


def test_stale_rows_and_nodes_without_reports() -> None:
    states = _states(S.stale_and_missing())
    assert states[("lab1/node1", "lab2/node1")] == "reachable"  # unknown path ignored
    assert states[("lab1/node2", "lab1/node1")] == "stale"  # not shown healthy
    assert states[("lab1/node2", "lab1/node3")] == "stale"
    assert states[("lab1/node3", "lab1/node1")] == "unknown"  # probed, never reported
    assert not any(source == "lab2/node1" for source, _ in states)  # lab2 was not read
    matrix = build_matrix(S.stale_and_missing(), now=S.NOW)
    assert matrix.lines == (
        "lab1/node2's report is stale (1m40s old, older than 1m35s): its agent is down, hung "
        "or cannot write to etcd",
    )
    # a stale source does not count as a witness against anyone
    stale_witness = S.node_unreachable_by_all()
    stale_witness[1] = S.report("lab1/node2", {"lab1/node3": S.paths((S.TIMEOUT,) * 4)},
                                age_s=100)  # fmt: skip
    lines = build_matrix(stale_witness, now=S.NOW).lines
    assert not any("unreachable from every other node" in line for line in lines)


def test_rows_for_clusters_read_and_extra_columns() -> None:
    matrix = build_matrix(
        S.healthy(("c/a", "c/b")),
        now=S.NOW,
        extra_nodes=[("c", "z"), ("d", "y")],
        source_clusters=["c"],
        unavailable={"d": "etcd down"},
    )
    assert [f"{c}/{n}" for c, n in matrix.columns] == ["c/a", "c/b", "c/z", "d/y"]
    assert [f"{c}/{n}" for c, n in (row.source for row in matrix.rows)] == ["c/a", "c/b", "c/z"]
    assert matrix.rows[2].probe_time is None
    assert matrix.unavailable == {"d": "etcd down"}


def test_the_newest_report_of_a_source_wins() -> None:
    old = S.report("c/a", {"c/a": S.paths((S.TIMEOUT,))}, age_s=5)
    new = S.report("c/a", {"c/a": S.paths()}, age_s=1)
    assert _states([new, old]) == {("c/a", "c/a"): "reachable"}


def test_json_document() -> None:
    doc = matrix_document(build_matrix(S.stale_and_missing(), now=S.NOW))
    assert doc["v"] == 1
    assert doc["generated_at"] == "2026-11-18T11:06:40Z"
    assert doc["nodes"][0] == {"cluster": "lab1", "name": "node1", "observers": 0}
    assert doc["nodes"][2] == {"cluster": "lab1", "name": "node3", "observers": 1}
    row = doc["rows"][1]
    assert (row["name"], row["stale"], row["age_s"], row["interval_s"]) == (
        "node2",
        True,
        100.0,
        10.0,
    )
    assert row["stale_after_s"] == 95.0 and doc["rows"][2]["stale_after_s"] is None
    cell = doc["rows"][0]["cells"][3]
    assert cell == {
        "cluster": "lab2",
        "name": "node1",
        "state": "reachable",
        "paths": {
            "node/icmp": {"status": "ok", "rtt_s": 0.0011, "loss": 0.0},
            "node/http": {"status": "unknown", "rtt_s": None, "loss": 0.0},
        },
    }
    assert doc["summary"]["sources"] == 2 and doc["summary"]["stale_sources"] == 1
    assert doc["summary"]["cells"] == 12
    assert doc["rows"][2]["probe_time"] is None


# --- subset probing: unassigned cells and coverage -----------------------------------


def test_cells_nobody_was_assigned_are_unassigned_not_failed_nor_unknown() -> None:
    matrix = build_matrix(S.subset(), now=S.NOW)
    states = {
        (row.source[1], cell.target[1]): cell.state for row in matrix.rows for cell in row.cells
    }
    assert states[("node1", "node2")] == "reachable"  # assigned
    assert states[("node1", "node4")] == "unassigned"  # not node1's target this epoch
    assert states[("node3", "node4")] == "unreachable"  # assigned, endpoint failing
    assert states[("node6", "node2")] == "stale"  # a stale report stays stale
    assert matrix.counts() == {
        "reachable": 14,
        "suspect": 0,
        "unreachable": 1,
        "stale": 6,
        "unassigned": 15,
        "unknown": 0,
    }
    assert matrix.observers == (1, 1, 2, 2, 2, 2)
    # Unassigned cells are not evidence: nobody "reaches no one" for having 2 targets.
    assert not any("reaches no one" in line for line in matrix.lines)
    assert "lab1/node1: 1 observer this epoch (plan: 2)" in matrix.lines
    assert matrix.lines[1].startswith("Coverage:  subset probing (k=2, epoch ")


def test_json_says_which_cells_are_unassigned_and_which_plan_each_row_followed() -> None:
    doc = matrix_document(build_matrix(S.subset(), now=S.NOW))
    row = doc["rows"][0]
    assert row["plan"] == {
        "epoch": S.EPOCH,
        "k": 2,
        "rotation_rounds": 6,
        "full_mesh": False,
        "full_mesh_max_nodes": 2,
        "nodes": 6,
        "subset": True,
    }
    assert [cell["state"] for cell in row["cells"]] == ["reachable"] * 3 + ["unassigned"] * 3
    assert row["cells"][3]["paths"] == {}
    assert doc["summary"]["unassigned"] == 15
    assert [node["observers"] for node in doc["nodes"]] == [1, 1, 2, 2, 2, 2]


def test_without_a_subset_plan_a_missing_target_is_unknown() -> None:
    """Reports of a full mesh (or of agents older than the plan) leave nothing unassigned."""
    full = S.subset()
    full[0] = S.report("lab1/node1", {"lab1/node1": S.paths()})  # no plan: older agent
    matrix = build_matrix(full, now=S.NOW)
    assert {cell.state for cell in matrix.rows[0].cells[1:]} == {"unknown"}
    meshed = [S.report(r, {r: S.paths()}, plan=PlanInfo(1, 5, 6, True, 16, 6)) for r in S.NODES6]
    assert "unassigned" not in {
        c.state for row in build_matrix(meshed, now=S.NOW).rows for c in row.cells
    }
    assert not any(line.startswith("Coverage") for line in build_matrix(meshed, now=S.NOW).lines)


def test_columns_and_rows_in_natural_order() -> None:
    """node2 before node10 in the columns, the rows and the JSON; clusters the same way."""
    nodes = ["lab10/node1", "lab2/node10", "lab2/node2", "lab2/node11", "lab2/node1"]
    matrix = build_matrix(S.healthy(nodes), now=S.NOW)
    ordered = [
        ("lab2", "node1"),
        ("lab2", "node2"),
        ("lab2", "node10"),
        ("lab2", "node11"),
        ("lab10", "node1"),
    ]
    assert list(matrix.columns) == ordered
    assert [row.source for row in matrix.rows] == ordered
    doc = matrix_document(matrix)
    assert [(n["cluster"], n["name"]) for n in doc["nodes"]] == ordered
    assert [(r["cluster"], r["name"]) for r in doc["rows"]] == ordered
    assert [(c["cluster"], c["name"]) for c in doc["rows"][0]["cells"]] == ordered


@pytest.mark.parametrize(
    ("story", "below_plan"),
    [(S.subset_healthy, False), (S.subset, True)],
)
def test_the_coverage_line_is_a_warning_only_below_plan(
    story: Callable[[], list[HealthReport]], below_plan: bool
) -> None:
    """Every node with its k observers: the `Coverage:` line is a note (information);
    a node short of k: it is a warning, with the node's own line."""
    matrix = build_matrix(story(), now=S.NOW)
    head = next(line for line in matrix.lines if line.startswith("Coverage:"))
    doc = matrix_document(matrix)
    assert doc["summary"]["lines"] == list(matrix.lines)  # every line, as the text has them
    if below_plan:
        assert matrix.notes == ()
        assert head in matrix.warnings
        assert "lab1/node1: 1 observer this epoch (plan: 2)" in matrix.warnings
        assert doc["summary"]["notes"] == []
    else:
        assert matrix.observers == (2,) * 6
        assert head.endswith(": 2 to 2 observers per node with fresh reports, 6 nodes")
        assert matrix.notes == (head,)
        assert matrix.warnings == ()
        assert doc["summary"]["notes"] == [head]


def test_coverage_without_a_subset_plan_says_nothing() -> None:
    found = coverage([PlanInfo(1, 5, 6, True, 16, 6)], [("lab1", "node1")], [0])
    assert found == Coverage()
    assert found.notes == ()


@pytest.mark.parametrize("story", [*sorted(S.STORIES), "subset_healthy"])
def test_sparse_rows_read_as_one_cell_per_column(story: str) -> None:
    """A row keeps only the cells its report lists; read in any way it is still one
    cell per column, and the cells it does not keep say nothing (default state, no
    paths), so what reads `listed_cells` only sees everything that matters."""
    reports = S.STORIES[story]() if story in S.STORIES else S.subset_healthy()
    matrix = build_matrix(reports, now=S.NOW)
    dense: dict[str, int] = dict.fromkeys(matrix.counts(), 0)
    for row in matrix.rows:
        cells = list(row.cells)
        assert len(row.cells) == len(cells) == len(matrix.columns)
        assert [c.target for c in cells] == list(matrix.columns)
        assert [row.cells[i] for i in range(len(cells))] == cells
        assert row.cells[-1] == cells[-1] and list(row.cells[1:3]) == cells[1:3]
        assert row.cells == tuple(cells)
        listed = [id(c) for c in row.listed_cells]
        for cell in cells:
            dense[cell.state] += 1
            if id(cell) not in listed:
                assert not cell.paths and not cell.secondary_paths
                assert cell.state in ("unassigned", "unknown", "stale")
    assert matrix.counts() == dense
