"""Dual stack in diagnosis (diagnosis/families.py): a target whose secondary addresses
(the other address family) fail while its primary ones answer is a `path` finding."""

from __future__ import annotations

from dataclasses import replace

import pytest

from meshhealth.diagnosis.cells import MatrixCell, Observer
from meshhealth.diagnosis.diagnose import diagnose
from meshhealth.diagnosis.findings import FindingKind
from meshhealth.diagnosis.view import MatrixView
from tests.diagnosis_builders import SINCE, cell, node

ABCD = ("a", "b", "c", "d")


def _view(
    secondary: dict[tuple[str, str], str],
    *,
    primary: str = "ok",
    degraded: str = "",
    family: dict[str, str | None] | None = None,
) -> MatrixView:
    """Every pair probed on both families: primary `primary`, secondary `ok` unless
    listed in `secondary`; `family`: what each observer says the secondary family is
    (default: nothing, as an agent before the field)."""
    cells: list[MatrixCell] = []
    for o in ABCD:
        for t in ABCD:
            if o != t:
                base = cell(o, t, primary)
                other = cell(o, t, secondary.get((o, t), "ok")).paths
                said = (family or {}).get(o)
                cells.append(replace(base, secondary=other, secondary_family=said))
    observers = [Observer(node(n), SINCE if n in degraded else None) for n in ABCD]
    return MatrixView.of(cells, observers, [node(n) for n in ABCD])


def _summary(view: MatrixView) -> list[tuple[str, tuple[str, ...]]]:
    return [(f.kind.value, tuple(n.node for n in f.nodes)) for f in diagnose(view)]


CASES = [
    ("healthy on both families", {}, "", []),
    ("d's secondary family fails from everyone: one finding naming d",
     {(o, "d"): "down" for o in "abc"}, "", [("path", ("d",))]),
    ("one observer fails d's secondary family: that path",
     {("a", "d"): "down"}, "", [("path", ("a", "d"))]),
    ("a degraded observer's secondary failures are discounted",
     {("a", "d"): "down"}, "a", [("observer-degraded", ("a",))]),
    ("suspect is not evidence yet", {(o, "d"): "suspect" for o in "abc"}, "", []),
    ("one secondary path ok is ok (agent down on it is another story)",
     {(o, "d"): "agent" for o in "abc"}, "", []),
]  # fmt: skip


@pytest.mark.parametrize(
    ("secondary", "degraded", "expected"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_secondary_family(
    secondary: dict[tuple[str, str], str], degraded: str, expected: list[object]
) -> None:
    assert _summary(_view(secondary, degraded=degraded)) == expected


def test_the_evidence_names_the_family_and_the_paths() -> None:
    (finding,) = diagnose(_view({(o, "d"): "down" for o in "abc"}))
    assert finding.kind is FindingKind.PATH and finding.nodes == (node("d"),)
    assert finding.evidence.startswith(
        "its secondary addresses (the other address family, dual stack) fail from 3 of 3 "
        "observers (lab1/a, lab1/b, lab1/c): endpoint/http, endpoint/icmp, node/http, "
        "node/icmp unreachable while its primary addresses answer"
    )
    assert finding.confidence == pytest.approx(0.875)
    assert set(finding.cells) == {(node(o), node("d")) for o in "abc"}


def test_a_node_down_on_both_families_is_named_once() -> None:
    """Primary failing too: the primary layers name it; no second finding."""
    view = _view({(o, "d"): "down" for o in "abc"})
    cells = [
        replace(c, paths=cell(c.observer.node, "d", "down").paths) if c.target == node("d") else c
        for c in view.cells
    ]
    found = diagnose(MatrixView.of(cells, view.observers, view.nodes))
    assert [(f.kind.value, f.nodes) for f in found] == [("ingress-blocked", (node("d"),))]


UNNAMED = "its secondary addresses (the other address family, dual stack)"


@pytest.mark.parametrize(
    ("family", "words"),
    [
        ({o: "ipv6" for o in "abc"}, "its IPv6 addresses (its secondary family, dual stack)"),
        ({o: "ipv4" for o in "abc"}, "its IPv4 addresses (its secondary family, dual stack)"),
        # one observer that does not say (an older agent): the family is not claimed
        ({"a": "ipv6", "b": "ipv6"}, UNNAMED),
        # observers that disagree: not claimed either
        ({"a": "ipv6", "b": "ipv4", "c": "ipv6"}, UNNAMED),
    ],
    ids=["ipv6", "ipv4", "one-observer-silent", "observers-disagree"],
)
def test_the_evidence_names_the_family_when_the_observers_say_it(
    family: dict[str, str | None], words: str
) -> None:
    (finding,) = diagnose(_view({(o, "d"): "down" for o in "abc"}, family=family))
    assert finding.evidence.startswith(words + " fail from 3 of 3 observers")


def test_one_observers_path_names_the_family_it_reports() -> None:
    (finding,) = diagnose(_view({("a", "d"): "down"}, family={"a": "ipv6"}))
    assert finding.nodes == (node("a"), node("d"))
    assert finding.evidence.startswith(
        "lab1/a -> lab1/d only over IPv6 addresses (its secondary family, dual stack): "
    )
