"""The helpers that read the docs' console examples (tests/docs_shape.py)."""

from __future__ import annotations

import pytest

from tests.docs_shape import examples, find_example, line_shape, not_printed, undocumented

DOC = """
text

```console
# meshhealth lab fault x node2
fault x on lab1/node2
# meshhealth lab exec node1 -- meshhealth status
  lab1/node2:
    ICMP to stack:   OK, RTT=85.05µs
  ...
Cluster health:   3/4 reachable (3 observers each)

next:
  meshhealth lab down
```

```console
$ meshhealth lab exec node1 -- meshhealth status      (after the lease TTL, 15 s)
Cluster health:   4/4 reachable
```
"""


def test_examples_split_commands_and_output() -> None:
    got = examples(DOC)
    assert [e.command for e in got] == [
        "meshhealth lab fault x node2",
        "meshhealth lab exec node1 -- meshhealth status",
        "meshhealth lab exec node1 -- meshhealth status      (after the lease TTL, 15 s)",
    ]
    assert got[0].output == ("fault x on lab1/node2",)
    assert got[1].output[-1].startswith("Cluster health:")  # a blank line ends it


def test_find_example_after_another() -> None:
    cmd = "meshhealth lab exec node1 -- meshhealth status"
    assert find_example(DOC, cmd).output[0] == "  lab1/node2:"
    assert find_example(DOC, cmd, after="meshhealth lab fault x node2").output[0] == (
        "  lab1/node2:"
    )
    with pytest.raises(LookupError):
        find_example(DOC, "meshhealth diagnose")
    two = "```console\n# meshhealth lab fault a\n# meshhealth lab fault b\n# x\nout\n```\n"
    assert find_example(two, "x", after="meshhealth lab fault b").output == ("out",)
    with pytest.raises(LookupError):  # not from the next fault's story
        find_example(two, "x", after="meshhealth lab fault a")


@pytest.mark.parametrize(
    ("line", "shape"),
    [
        ("", None),
        ("  ...", None),
        ("  lab1/node2:", (1, "<node>")),
        ("  lab1/node1 (localhost):", (1, "<node> (localhost)")),
        ("    Host connectivity to 10.77.0.2:", (2, "Host connectivity to <ip>")),
        ("      ICMP 1500 B DF:  OK, RTT=70.91µs", (3, "ICMP <n> B DF")),
        ("Cluster health:   3/4 reachable", (0, "Cluster health")),
        (
            "Probing all 4 nodes (full mesh at ≤16 nodes, k=5 past that)",
            (0, "Probing all <n> nodes (full mesh at ≤<n> nodes, k=<n> past that)"),
        ),
    ],
)
def test_line_shape(line: str, shape: tuple[int, str] | None) -> None:
    assert line_shape(line) == shape


def test_undocumented_and_not_printed() -> None:
    example = find_example(DOC, "meshhealth lab exec node1 -- meshhealth status")
    printed = "Probe time:   2026-11-27T03:00:12Z\n  lab1/node3:\nCluster health:   2/4\n"
    assert undocumented(example, printed) == {(0, "Probe time")}
    assert not_printed(example, printed) == {(2, "ICMP to stack")}


def test_a_top_level_ellipsis_hides_top_level_lines() -> None:
    cut = examples("```console\n# cmd\n...\nCluster health:   1/1\n```\n")[0]
    assert undocumented(cut, "Probe time:   x\nCluster health:   1/1\n") == set()
