"""Indirect probes, pure parts: the request's query, the answer's document, the choice of
helpers and the conclusion rule (meshhealth.documents.indirect, agent/indirect/policy.py)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meshhealth.agent.indirect.policy import (
    Conclusion,
    HelperOutcome,
    IndirectCheck,
    check_document,
    choose_helpers,
    conclude,
    reaching_in_matrix,
)
from meshhealth.documents.indirect import (
    AnswerError,
    HelperPath,
    IndirectQuery,
    Refusal,
    build_answer,
    encode_answer,
    indirect_query,
    parse_answer,
    parse_indirect_query,
)
from meshhealth.documents.matrix import build_matrix
from meshhealth.model import (
    HealthReport,
    PathHealth,
    PathKey,
    PathReport,
    ProbeResult,
    ProbeStatus,
    Protocol,
    Target,
    TargetHealth,
    TargetType,
)

NODE_ICMP = PathKey("c1", "t", TargetType.NODE, Protocol.ICMP)
NODE_HTTP = PathKey("c1", "t", TargetType.NODE, Protocol.HTTP)


# --- the request ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "query", "expected"),
    [
        ("GET", "cluster=c1&node=n3", IndirectQuery("c1", "n3")),
        ("GET", "node=n3&cluster=c1&endpoint=1", IndirectQuery("c1", "n3", endpoint=True)),
        ("GET", "cluster=c1&node=n3&endpoint=0", IndirectQuery("c1", "n3")),
        ("POST", "cluster=c1&node=n3", 405),
        ("GET", "", 400),
        ("GET", "cluster=c1", 400),
        ("GET", "cluster=c1&node=", 400),
        ("GET", "cluster=c1&node=n3&x=1", 400),
        ("GET", "cluster=c1&node=n3&node=n4", 400),
        ("GET", "cluster=c1&node=N3", 400),  # not a valid node name
        ("GET", "cluster=c1&node=n%33", 400),  # no percent-decoding: not a name
        ("GET", "cluster=c1&node=n3&endpoint=yes", 400),
        ("GET", "cluster&node=n3", 400),
        ("GET", "cluster=c1&&node=n3", 400),
        ("GET", "cluster=c1&node=10.0.0.1", IndirectQuery("c1", "10.0.0.1")),  # a name
    ],
)
def test_parse_indirect_query(method: str, query: str, expected: IndirectQuery | int) -> None:
    got = parse_indirect_query(method, query)
    if isinstance(expected, int):
        assert isinstance(got, Refusal)
        assert got.status_code == expected
        assert got.reason and "\n" not in got.reason
    else:
        assert got == expected


NAMES = st.from_regex(r"[a-z][a-z0-9-]{0,10}[a-z0-9]", fullmatch=True)


@settings(deadline=None)
@given(cluster=NAMES, node=NAMES, endpoint=st.booleans())
def test_query_round_trips(cluster: str, node: str, endpoint: bool) -> None:
    query = IndirectQuery(cluster, node, endpoint)
    path, _, text = indirect_query(query).partition("?")
    assert path == "/v1/indirect"
    assert parse_indirect_query("GET", text) == query


@settings(deadline=None)
@given(query=st.text(max_size=80))
def test_any_query_is_parsed_or_refused_with_one_line(query: str) -> None:
    got = parse_indirect_query("GET", query)
    if isinstance(got, Refusal):
        assert got.status_code == 400
        assert "\n" not in got.reason


# --- the answer -----------------------------------------------------------------------


def _report(key: PathKey, status: ProbeStatus, rtts: tuple[float, ...] = ()) -> PathReport:
    return PathReport(key, "10.0.0.3", ProbeResult(status, 1000.0, rtts_s=rtts))


def test_answer_round_trips() -> None:
    answer = build_answer(
        helper=("c1", "h"),
        target=("c1", "t"),
        reports=[
            _report(NODE_ICMP, ProbeStatus.OK, (0.001, 0.003)),
            _report(NODE_HTTP, ProbeStatus.TIMEOUT),
        ],
    )
    assert answer["paths"][0] == {
        "path": "node/icmp",
        "ip": "10.0.0.3",
        "status": "ok",
        "rtt_s": 0.002,
        "prober": "c1/h",
    }
    assert answer["probed_at"] == "1970-01-01T00:16:40Z"
    parsed = parse_answer(encode_answer(answer), target=("c1", "t"))
    assert parsed == {
        "node/icmp": HelperPath("node/icmp", ProbeStatus.OK, 0.002),
        "node/http": HelperPath("node/http", ProbeStatus.TIMEOUT, None),
    }


GOOD = {"v": 1, "helper": "c1/h", "target": "c1/t", "probed_at": None, "paths": []}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"not json", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b"[]", "version 1"),
        (json.dumps({**GOOD, "v": 2}).encode(), "version 1"),
        (json.dumps({**GOOD, "target": "c1/x"}).encode(), "about 'c1/x'"),
        (json.dumps({**GOOD, "paths": {}}).encode(), "no paths list"),
        (json.dumps({**GOOD, "paths": [1]}).encode(), "not an object"),
        (json.dumps({**GOOD, "paths": [{"path": "x/y", "status": "ok"}]}).encode(), "unknown path"),
        (
            json.dumps({**GOOD, "paths": [{"path": "node/icmp", "status": "up"}]}).encode(),
            "unknown status",
        ),
        (
            json.dumps(
                {**GOOD, "paths": [{"path": "node/icmp", "status": "ok", "rtt_s": -1}]}
            ).encode(),
            "bad rtt_s",
        ),
        (b" " * 20000, "larger than"),
    ],
)
def test_bad_answers_are_refused(body: bytes, message: str) -> None:
    with pytest.raises(AnswerError, match=message):
        parse_answer(body, target=("c1", "t"))


# --- whom to ask ----------------------------------------------------------------------


def _target(name: str, cluster: str = "c1") -> Target:
    return Target(cluster, name, f"10.0.0.{len(name)}")


LIVE = [_target(n) for n in ("me", "t", "a", "b", "c", "d", "e")]


@pytest.mark.parametrize(
    ("reaching", "k", "must_be", "count"),
    [
        ((), 3, set(), 3),
        ((("c1", "d"),), 3, {"d"}, 3),
        ((("c1", "d"), ("c1", "e")), 2, {"d", "e"}, 2),
        ((("c1", "t"), ("c1", "me")), 3, set(), 3),  # never the target nor itself
        ((), 10, {"a", "b", "c", "d", "e"}, 5),  # fewer candidates than k
        ((), 0, set(), 0),
    ],
)
def test_choose_helpers_table(
    reaching: tuple[tuple[str, str], ...], k: int, must_be: set[str], count: int
) -> None:
    chosen = choose_helpers(("c1", "t"), LIVE, own=("c1", "me"), k=k, reaching=reaching)
    names = [t.node for t in chosen]
    assert len(names) == count
    assert must_be <= set(names)
    assert "me" not in names and "t" not in names
    # Those known to reach the target come first.
    assert set(names[: len(must_be)]) == must_be


def test_choose_helpers_spreads_over_requesters() -> None:
    """Different requesters of one target do not all pick the same helpers."""
    live = [_target(f"n{i}") for i in range(30)]
    picks = {
        tuple(t.node for t in choose_helpers(("c1", "n0"), live, own=("c1", f"n{i}"), k=3))
        for i in range(1, 30)
    }
    assert len(picks) > 10


REFS = st.sampled_from([("c1", f"n{i}") for i in range(12)] + [("c2", "n1")])


@settings(deadline=None)
@given(
    live=st.lists(REFS, unique=True, max_size=13),
    reaching=st.sets(REFS),
    probers=st.sets(REFS),
    own=REFS,
    target=REFS,
    k=st.integers(min_value=0, max_value=5),
)
def test_choose_helpers_properties(  # noqa: PLR0917 - hypothesis passes them by name
    live: list[tuple[str, str]],
    reaching: set[tuple[str, str]],
    probers: set[tuple[str, str]],
    own: tuple[str, str],
    target: tuple[str, str],
    k: int,
) -> None:
    targets = [Target(c, n, "10.0.0.1") for c, n in live]
    chosen = choose_helpers(target, targets, own=own, k=k, reaching=reaching, probers=probers)
    refs = [(t.cluster, t.node) for t in chosen]
    candidates = set(live) - {own, target}
    assert len(refs) == min(k, len(candidates))
    assert len(set(refs)) == len(refs)
    assert set(refs) <= candidates
    # Preference: no candidate that reaches the target is left out for one that does not.
    if set(refs) - reaching:
        assert candidates & reaching <= set(refs)
    # Stable: the same inputs, in another order, give the same helpers.
    again = choose_helpers(target, targets[::-1], own=own, k=k, reaching=reaching, probers=probers)
    assert again == chosen


def test_reaching_in_matrix_reads_fresh_reports_that_show_the_target_ok() -> None:
    def report(node: str, status: ProbeStatus, probe_time: float) -> HealthReport:
        paths = {"node/icmp": PathHealth(status, 0.001, 0.0)}
        return HealthReport(node, "c1", probe_time, 1.0, (TargetHealth("c1", "t", paths),))

    matrix = build_matrix(
        [
            report("a", ProbeStatus.OK, 100.0),
            report("b", ProbeStatus.TIMEOUT, 100.0),
            report("old", ProbeStatus.OK, 10.0),  # stale: not trusted
        ],
        now=100.5,
    )
    assert reaching_in_matrix(matrix, ("c1", "t")) == {("c1", "a")}
    assert reaching_in_matrix(matrix, ("c1", "nobody")) == frozenset()


# --- what the answers mean ------------------------------------------------------------


def _outcome(name: str, **paths: ProbeStatus | None) -> HelperOutcome:
    if not paths:
        return HelperOutcome(("c1", name), error="timed out")
    found = {
        key.replace("_", "/"): HelperPath(key.replace("_", "/"), status, None)
        for key, status in paths.items()
        if status is not None
    }
    return HelperOutcome(("c1", name), paths=found)


OK, TIMEOUT = ProbeStatus.OK, ProbeStatus.TIMEOUT


@pytest.mark.parametrize(
    ("outcomes", "conclusion", "detail"),
    [
        ([], Conclusion.NO_HELPER, "no other node to ask"),
        (
            [_outcome("a", node_icmp=OK), _outcome("b", node_icmp=OK)],
            Conclusion.PATH_BROKEN,
            "reachable via c1/a, c1/b: path from this node broken",
        ),
        (
            [_outcome("a", node_icmp=TIMEOUT), _outcome("b", node_icmp=OK), _outcome("c")],
            Conclusion.PATH_BROKEN,
            "reachable via c1/b: path from this node broken",
        ),
        (
            [_outcome("a", node_icmp=TIMEOUT), _outcome("b", node_icmp=TIMEOUT)],
            Conclusion.TARGET_DOWN,
            "unreachable from c1/a, c1/b too: fault at the target's end, not this node's path",
        ),
        (
            [_outcome("a", node_icmp=TIMEOUT), _outcome("b")],
            Conclusion.TARGET_DOWN,
            "unreachable from c1/a too: fault at the target's end, not this node's path",
        ),
        ([_outcome("a"), _outcome("b")], Conclusion.NO_ANSWER, "no helper answered"),
        # An answer without this path says nothing about it.
        ([_outcome("a", node_http=OK)], Conclusion.NO_ANSWER, "no helper answered"),
    ],
)
def test_conclusion_table(
    outcomes: list[HelperOutcome], conclusion: Conclusion, detail: str
) -> None:
    check = conclude(NODE_ICMP, outcomes, checked_at=5.0)
    assert check.conclusion is conclusion
    assert check.detail() == detail
    assert check.confirms_failure == (conclusion is Conclusion.TARGET_DOWN)


def test_detail_names_helpers_in_natural_order_with_their_cluster() -> None:
    """`lab1/node3, lab1/node4, lab1/node10`, whatever order the answers came in."""
    outcomes = [_outcome(name, node_icmp=TIMEOUT) for name in ("node4", "node10", "node3")]
    check = conclude(NODE_ICMP, outcomes, checked_at=0.0)
    assert check.failed_via == (("c1", "node3"), ("c1", "node4"), ("c1", "node10"))
    assert check.detail() == (
        "unreachable from c1/node3, c1/node4, c1/node10 too: "
        "fault at the target's end, not this node's path"
    )


def test_detail_of_a_failing_endpoint_does_not_say_the_node_is_down() -> None:
    """endpoint-forward-drop: the node is up, only its HealthIP fails for everyone."""
    path = PathKey("c1", "t", TargetType.ENDPOINT, Protocol.ICMP)
    outcomes = [_outcome(name, endpoint_icmp=TIMEOUT) for name in ("b", "a")]
    check = conclude(path, outcomes, checked_at=0.0)
    assert check.conclusion is Conclusion.TARGET_DOWN
    assert check.detail() == (
        "unreachable from c1/a, c1/b too: fault at the target's endpoint, not this node's path"
    )


def test_detail_names_other_clusters_in_full() -> None:
    check = IndirectCheck(NODE_ICMP, Conclusion.PATH_BROKEN, reachable_via=(("c2", "x"),))
    assert check.detail() == "reachable via c2/x: path from this node broken"
    assert check_document(check) == {
        "conclusion": "path-broken",
        "detail": "reachable via c2/x: path from this node broken",
        "reachable_via": ["c2/x"],
        "failed_via": [],
        "checked_at": "1970-01-01T00:00:00Z",
    }


STATUSES = st.sampled_from([OK, TIMEOUT, ProbeStatus.REFUSED, None])


@settings(deadline=None)
@given(st.lists(st.tuples(st.booleans(), STATUSES), max_size=5))
def test_conclusion_properties(helpers: list[tuple[bool, ProbeStatus | None]]) -> None:
    outcomes = [
        _outcome(f"h{i}", node_icmp=status) if answered else _outcome(f"h{i}")
        for i, (answered, status) in enumerate(helpers)
    ]
    check = conclude(NODE_ICMP, outcomes, checked_at=0.0)
    # Every helper is accounted for exactly once.
    every = check.reachable_via + check.failed_via + check.unanswered
    assert sorted(every) == sorted(o.helper for o in outcomes)
    # One helper that reaches the path is enough to call the path broken, and a path
    # some helper reaches is never called down.
    assert (check.conclusion is Conclusion.PATH_BROKEN) == bool(check.reachable_via)
    if check.conclusion is Conclusion.TARGET_DOWN:
        assert check.failed_via and not check.reachable_via
    if not outcomes:
        assert check.conclusion is Conclusion.NO_HELPER


def test_a_node_whose_agent_is_down_is_never_a_helper() -> None:
    down = Target("c1", "a", "10.0.0.9", agent_down_since=50.0)
    live = [_target("me"), _target("t"), down, _target("b")]
    chosen = choose_helpers(("c1", "t"), live, own=("c1", "me"), k=3, reaching=[("c1", "a")])
    assert [t.node for t in chosen] == ["b"]


def test_a_node_whose_responder_we_fail_is_never_a_helper() -> None:
    live = [_target("me"), _target("t"), _target("a"), _target("b")]
    chosen = choose_helpers(("c1", "t"), live, own=("c1", "me"), k=3, unreachable=[("c1", "a")])
    assert [t.node for t in chosen] == ["b"]
