"""The one reachability rule (meshhealth.documents.reachability) and its three users:
the status document, the matrix and `watch` must agree on every combination."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from meshhealth.cli.watch_state import NodeView, PathView
from meshhealth.documents.matrix import cell_state
from meshhealth.documents.reachability import (
    combined_reachability,
    status_reachability,
    statuses_reachability,
)
from meshhealth.documents.status import path_state
from meshhealth.model import PATH_STATES, PathHealth, PathSummary, ProbeResult, ProbeStatus

S = ProbeStatus


@pytest.mark.parametrize(
    ("status", "state"),
    [
        (None, "unknown"),
        (S.UNKNOWN, "unknown"),
        ("unknown", "unknown"),  # read back from JSON
        (S.OK, "reachable"),
        ("ok", "reachable"),
        (S.TIMEOUT, "unreachable"),
        (S.REFUSED, "unreachable"),
        (S.RESET, "unreachable"),
        (S.UNREACHABLE, "unreachable"),
        (S.HTTP_ERROR, "unreachable"),
        (S.INVALID, "unreachable"),
        (S.ERROR, "unreachable"),
        ("a_status_from_a_newer_agent", "unreachable"),
    ],
)
def test_one_path(status: str | None, state: str) -> None:
    assert status_reachability(status) == state


@pytest.mark.parametrize(
    ("states", "state"),
    [
        ((), "unknown"),
        (("unknown", "unknown"), "unknown"),
        (("reachable", "unknown"), "reachable"),  # not probed yet does not count
        (("reachable", "reachable"), "reachable"),
        (("reachable", "unreachable"), "unreachable"),
        (("unknown", "unreachable"), "unreachable"),
        (("unreachable", "reachable", "unknown", "reachable"), "unreachable"),
    ],
)
def test_several_paths(states: tuple[str, ...], state: str) -> None:
    assert combined_reachability(states) == state  # type: ignore[arg-type]


STATUSES = st.lists(st.sampled_from(list(ProbeStatus)), max_size=4)


@given(STATUSES)
def test_combined_is_order_free_and_matches_the_definition(statuses: list[ProbeStatus]) -> None:
    states = [status_reachability(s) for s in statuses]
    combined = combined_reachability(states)
    assert combined in PATH_STATES
    assert combined_reachability(reversed(states)) == combined
    probed = [s for s in statuses if s is not S.UNKNOWN]
    expected = (
        "unknown"
        if not probed
        else "reachable"
        if all(s is S.OK for s in probed)
        else "unreachable"
    )
    assert combined == expected


def _summary(status: ProbeStatus) -> PathSummary:
    result = ProbeResult(status, 100.0, (0.001,) if status is S.OK else ())
    return PathSummary(1, result, 0.0, None, None, None, None, 100.0, None, 0)


PATHS = ("node/icmp", "node/http", "endpoint/icmp", "endpoint/http")


@pytest.mark.parametrize(
    "statuses", list(itertools.product([S.OK, S.TIMEOUT, S.UNKNOWN], repeat=3))
)
def test_status_matrix_and_watch_agree(statuses: tuple[ProbeStatus, ...]) -> None:
    expected = statuses_reachability(statuses)
    status_doc = combined_reachability(path_state(_summary(s)) for s in statuses)
    matrix = cell_state(
        {name: PathHealth(s, None, 0.0) for name, s in zip(PATHS, statuses, strict=False)}
    )
    node = NodeView(
        "c", "n", paths={n: PathView(s.value, "") for n, s in zip(PATHS, statuses, strict=False)}
    )
    assert status_doc == matrix == node.state == expected
    assert path_state(None) == "unknown"


@pytest.mark.parametrize(
    ("status", "verdict", "state"),
    [
        (S.TIMEOUT, "suspect", "suspect"),  # failing, not for long enough
        (S.TIMEOUT, "unreachable", "unreachable"),
        (S.OK, "ok", "reachable"),
        (S.TIMEOUT, None, "unreachable"),  # an older agent's report: by status
        (S.TIMEOUT, "a_verdict_from_a_newer_agent", "unreachable"),
        (S.UNKNOWN, "suspect", "unknown"),  # never probed wins
        (None, "ok", "unknown"),
    ],
)
def test_one_path_with_its_verdict(status: str | None, verdict: str | None, state: str) -> None:
    assert status_reachability(status, verdict) == state


@pytest.mark.parametrize(
    ("states", "state"),
    [
        (("reachable", "suspect"), "suspect"),
        (("suspect", "unknown"), "suspect"),
        (("suspect", "unreachable"), "unreachable"),
        (("unknown", "suspect", "reachable"), "suspect"),
    ],
)
def test_suspect_is_neither(states: tuple[str, ...], state: str) -> None:
    assert combined_reachability(states) == state  # type: ignore[arg-type]


class _Verdict:
    def __init__(self, verdict: str) -> None:
        self.verdict = verdict
        self.since = 100.0


VERDICTS = ["ok", "suspect", "unreachable", None]


@pytest.mark.parametrize(
    "paths",
    list(
        itertools.product(
            [(S.OK, "ok"), (S.TIMEOUT, "suspect"), (S.TIMEOUT, "unreachable"), (S.UNKNOWN, None)],
            repeat=3,
        )
    ),
)
def test_status_watch_and_metrics_agree_with_verdicts(
    paths: tuple[tuple[ProbeStatus, str | None], ...],
) -> None:
    statuses = [s for s, _ in paths]
    verdicts = [v for _, v in paths]
    expected = statuses_reachability(statuses, verdicts)
    status_doc = combined_reachability(
        path_state(_summary(s), None if v is None else _Verdict(v)) for s, v in paths
    )
    node = NodeView(
        "c",
        "n",
        paths={
            n: PathView(
                s.value, "", state=path_state(_summary(s), None if v is None else _Verdict(v))
            )
            for n, (s, v) in zip(PATHS, paths, strict=False)
        },
    )
    assert status_doc == node.state == expected
    if "unreachable" in verdicts:
        assert expected == "unreachable"
    elif "suspect" in verdicts:
        assert expected == "suspect"
