"""Natural order of node names (meshhealth.naming): tables and properties."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from meshhealth.naming import natural_key, node_order


@pytest.mark.parametrize(
    ("names", "ordered"),
    [
        (["node10", "node2", "node1"], ["node1", "node2", "node10"]),
        (
            ["node1", "node10", "node11", "node2", "node9"],
            ["node1", "node2", "node9", "node10", "node11"],
        ),
        (["n100", "n20", "n3"], ["n3", "n20", "n100"]),
        # a digit run ends the text before it: node0 reads ("node", 0), before "node-a"
        (["node-a", "node0", "node"], ["node", "node0", "node-a"]),
        (["10", "9", "a"], ["9", "10", "a"]),  # a name may start with digits
        (
            ["rack2-node10", "rack10-node1", "rack2-node9"],
            ["rack2-node9", "rack2-node10", "rack10-node1"],
        ),
        (["node1", "node01", "node001"], ["node001", "node01", "node1"]),  # same value: text
        (["node0001", "node1000", "node0010"], ["node0001", "node0010", "node1000"]),
        (["a" + "9" * 30, "a1" + "0" * 30], ["a" + "9" * 30, "a1" + "0" * 30]),  # no overflow
    ],
)
def test_natural_order(names: list[str], ordered: list[str]) -> None:
    assert sorted(names, key=natural_key) == ordered


@pytest.mark.parametrize(
    ("refs", "ordered"),
    [
        (
            [("lab10", "node1"), ("lab2", "node10"), ("lab2", "node2")],
            [("lab2", "node2"), ("lab2", "node10"), ("lab10", "node1")],
        ),
        (  # the cluster first: lab1/node10 before lab2/node1
            [("lab2", "node1"), ("lab1", "node10"), ("lab1", "node9")],
            [("lab1", "node9"), ("lab1", "node10"), ("lab2", "node1")],
        ),
    ],
)
def test_node_order_is_cluster_then_node(
    refs: list[tuple[str, str]], ordered: list[tuple[str, str]]
) -> None:
    assert sorted(refs, key=node_order) == ordered


NAMES = st.text(alphabet="abn-.019", max_size=12)


@given(NAMES, NAMES)
def test_order_is_total_and_antisymmetric(a: str, b: str) -> None:
    ka, kb = natural_key(a), natural_key(b)
    assert (ka == kb) == (a == b)  # equal keys only for equal names: a total order
    assert (ka < kb) + (kb < ka) + (ka == kb) == 1


@given(NAMES, NAMES, NAMES)
def test_order_is_transitive(a: str, b: str, c: str) -> None:
    x, y, z = sorted([a, b, c], key=natural_key)
    assert natural_key(x) <= natural_key(y) <= natural_key(z)
    assert natural_key(x) <= natural_key(z)


@given(
    st.text(alphabet="abn-", min_size=1, max_size=6), st.integers(0, 10**12), st.integers(0, 10**12)
)
def test_digit_runs_compare_by_value(prefix: str, m: int, n: int) -> None:
    assert (natural_key(f"{prefix}{m}") < natural_key(f"{prefix}{n}")) == (m < n)
    assert (natural_key(f"{prefix}{m}x") < natural_key(f"{prefix}{n}y")) == (m < n or m == n)


@given(st.lists(st.tuples(NAMES, NAMES), max_size=8))
def test_node_order_sorts_by_cluster_then_node(refs: list[tuple[str, str]]) -> None:
    ordered = sorted(refs, key=node_order)
    for (c1, n1), (c2, n2) in itertools.pairwise(ordered):
        assert natural_key(c1) <= natural_key(c2)
        if c1 == c2:
            assert natural_key(n1) <= natural_key(n2)
