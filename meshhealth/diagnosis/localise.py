"""Whose fault: 007-style votes over failing pairs, explained greedily (pure).

Every failing pair (observer -> target) votes for both its ends. The node whose row or
column explains the most unexplained failures is blamed first, its failures are taken
out, and the votes are counted again, until no node explains anything; what is left
are single paths. A node is blamed for its *column* (others fail to reach it) only when
at least `min_witnesses` distinct observers fail it (a stale report of the node itself
counts as one witness in the layers where it says something), and for its *row* (it
fails to reach others) on its own report; either way, only when at least `share` of the
side's assessed cells fail. So one observer's report is never evidence against another
node: a bad observer explains its own row first, and nothing is left to blame others.

Pairs that are not assessed (unassigned, stale, suspect) are in neither `fails` nor
`oks`: with subset probing a row or column is judged on the cells that were probed.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from meshhealth import defaults
from meshhealth.diagnosis.cells import NodeId
from meshhealth.diagnosis.layers import Pair, ok_counts


@dataclass(frozen=True, slots=True)
class Blame:
    node: NodeId
    column: frozenset[Pair]  # the failing pairs into the node this blame explains
    row: frozenset[Pair]  # the failing pairs out of the node this blame explains
    column_failing: bool  # most of its column fails (whatever was picked)
    row_failing: bool  # most of its own row fails, by its own report
    column_ok: int  # observers that reach it
    row_ok: int  # targets it reaches
    witness: bool  # its own stale report counted as a witness


@dataclass(frozen=True, slots=True)
class Localised:
    blames: tuple[Blame, ...]
    paths: tuple[Pair, ...]  # failing pairs no node explains, sorted


def _share(failing: int, ok: int) -> float:
    return failing / (failing + ok) if failing + ok else 0.0


def localise(
    nodes: Iterable[NodeId],
    fails: Collection[Pair],
    oks: Collection[Pair],
    *,
    own_fails: Collection[Pair] | None = None,
    witnesses: Collection[NodeId] = (),
    min_witnesses: int = defaults.DIAGNOSIS_MIN_OBSERVERS,
    share: float = defaults.DIAGNOSIS_FAIL_SHARE,
    counts: tuple[Mapping[NodeId, int], Mapping[NodeId, int]] | None = None,
) -> Localised:
    """Blame nodes for `fails` (pairs from observers that count), greedily. Of `nodes`
    (every known node) only those at an end of a failing pair can be blamed: the others
    are not looked at, so the cost follows the failures, not the cluster's size.

    `own_fails`: every failing pair including those of discounted observers, read only
    to tell whether a blamed node's own row fails (default: `fails`). `witnesses`: nodes
    whose own stale report counts as one more witness against their column. `counts`:
    `layers.ok_counts(oks)` when the caller has it already.
    """
    own = set(fails if own_fails is None else own_fails)
    remaining = set(fails)
    row_ok, col_ok = counts if counts is not None else ok_counts(oks)
    all_rows, all_cols = _by_end(own, 0), _by_end(set(fails), 1)
    blamed: set[NodeId] = set()
    blames: list[Blame] = []
    while remaining:
        cols, rows = _by_end(remaining, 1), _by_end(remaining, 0)
        best: tuple[int, int, NodeId] | None = None
        # Only a node with a failing pair left can be blamed; `best` is a minimum (the
        # node breaks ties), so the order of this loop does not matter.
        for node in cols.keys() | rows.keys():
            if node in blamed:
                continue
            col, row = cols.get(node, set()), rows.get(node, set())
            witnessed = len({o for o, _ in col}) + (1 if node in witnesses else 0)
            if (
                col
                and witnessed >= min_witnesses
                and _share(len(col), col_ok.get(node, 0)) >= share
            ):
                score = (-len(col), 0, node)  # columns first on a tie
                best = score if best is None or score < best else best
            if row and _share(len(row), row_ok.get(node, 0)) >= share:
                score = (-len(row), 1, node)
                best = score if best is None or score < best else best
        if best is None:
            break
        _, side, node = best
        col, row = cols.get(node, set()), rows.get(node, set())
        # The other side, judged on everything known (not only what is unexplained).
        all_col = all_cols.get(node, set())
        column_failing = side == 0 or (
            bool(all_col) and _share(len(all_col), col_ok.get(node, 0)) >= share
        )
        own_row = all_rows.get(node, set())
        row_failing = side == 1 or (
            bool(own_row) and _share(len(own_row), row_ok.get(node, 0)) >= share
        )
        explained_col = frozenset(col) if column_failing else frozenset()
        explained_row = frozenset(row) if row_failing else frozenset()
        blames.append(
            Blame(
                node, explained_col, explained_row, column_failing, row_failing,
                col_ok.get(node, 0), row_ok.get(node, 0),
                witness=column_failing and node in witnesses,
            )
        )  # fmt: skip
        blamed.add(node)
        remaining -= explained_col | explained_row
    return Localised(tuple(blames), tuple(sorted(remaining)))


def _by_end(pairs: Iterable[Pair], end: int) -> dict[NodeId, set[Pair]]:
    out: dict[NodeId, set[Pair]] = {}
    for pair in pairs:
        out.setdefault(pair[end], set()).add(pair)
    return out
