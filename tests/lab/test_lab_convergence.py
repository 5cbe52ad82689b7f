"""What `lab up` waits for: every node reachable in node1's cluster verdict (the
aggregators' summaries), else in its own direct targets. Pure: tables."""

from __future__ import annotations

from typing import Any

import pytest

from meshhealth.cli.lab_cmd import convergence


def verdict(cluster: str, reachable: int, total: int, source: str = "summary") -> dict[str, Any]:
    return {"cluster": cluster, "source": source, "reachable": reachable, "total": total}


SUMMARY = {"reachable": 6, "unreachable": 0, "unknown": 0, "total": 6}


@pytest.mark.parametrize(
    ("doc", "want"),
    [
        # the cluster verdicts of every cluster node1 sees, summed
        (
            {"summary": SUMMARY, "cluster_health": [verdict("lab1", 100, 100)]},
            (100, 100, "cluster verdict lab1 100/100 reachable"),
        ),
        (
            {
                "summary": SUMMARY,
                "cluster_health": [verdict("lab1", 50, 50), verdict("lab2", 48, 50)],
            },
            (98, 100, "cluster verdict lab1 50/50, lab2 48/50 reachable"),
        ),
        # a cluster without a summary yet is node1's own view: not the cluster's verdict
        (
            {"summary": SUMMARY, "cluster_health": [verdict("lab1", 6, 6, "local")]},
            (6, 6, "own targets 6/6 reachable (no cluster verdict yet)"),
        ),
        # an agent without cluster verdicts at all
        ({"summary": SUMMARY}, (6, 6, "own targets 6/6 reachable (no cluster verdict yet)")),
    ],
)
def test_convergence(doc: dict[str, Any], want: tuple[int, int, str]) -> None:
    assert convergence(doc) == want


def test_a_document_without_a_summary_is_not_converged() -> None:
    with pytest.raises(KeyError):
        convergence({"cluster_health": []})
