"""The order nodes are shown in: natural, so node2 comes before node10 (pure).

    sorted(refs, key=node_order)             # (cluster, node) pairs: cluster, then node
    sorted(names, key=natural_key)           # plain names

A name is cut into runs of digits and runs of other characters; digit runs compare by
their numeric value, other runs as text. `node1, node2, ..., node9, node10, node11`
instead of the text order `node1, node10, node11, node2`. Two names that read the
same number differently (`node01`, `node1`) still differ: the text breaks the tie, so
the order is total and a sort gives one answer whatever order it was handed.

The status document, the matrix (text, JSON, the web page's data), `watch` and the
node lists of diagnosis's evidence (diagnosis.findings `names`) all sort with this key;
the web page's own copy is `naturalCompare` in meshhealth/web/app.js.
"""

from __future__ import annotations

import functools
import re

_DIGIT_RUNS = re.compile(r"(\d+)")

# Text runs (even places) and the numbers of digit runs (odd places), then the text.
NaturalKey = tuple[tuple[str | int, ...], str]


# The same names are sorted round after round (the matrix is built once per round):
# their keys are kept, up to a bound.
@functools.lru_cache(maxsize=1 << 16)
def natural_key(text: str) -> NaturalKey:
    """The sort key of one name: `node10` -> (("node", 10, ""), "node10")."""
    parts = _DIGIT_RUNS.split(text)
    # re.split with a group alternates: text, digits, text, ...: odd places are digits.
    return tuple(int(p) if i % 2 else p for i, p in enumerate(parts)), text


def node_order(ref: tuple[str, str]) -> tuple[NaturalKey, NaturalKey]:
    """The sort key of a (cluster, node) pair: by cluster, then by node, both natural."""
    return natural_key(ref[0]), natural_key(ref[1])
