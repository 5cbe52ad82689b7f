"""The chaos soak, short: bench/chaos_soak.py on a 6-node lab with a 3-member etcd for
3 minutes, seed 1 (overlapping faults: egress-drop, starve, endpoint-forward-drop,
partition, ingress-drop), must score every invariant with checks and break none, and
remove its lab."""

from __future__ import annotations

import subprocess
import sys

import pytest

from meshhealth.lab import netns_ops
from meshhealth.lab.chaos_score import INVARIANTS
from tests.plugins.netns import require_root
from tests.repo_paths import REPO_ROOT

pytestmark = [pytest.mark.netns, pytest.mark.slow]

SOAK = REPO_ROOT / "bench" / "chaos_soak.py"
PREFIX = "mhskci"  # not the soak's default: a soak by hand may run beside the test


def score_rows(out: str) -> dict[str, tuple[int, int]]:
    """invariant -> (checks, violations) from the soak's score table."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:2] == ["invariant", "checks"])
    rows = {}
    for line in lines[start + 1 : start + 1 + len(INVARIANTS)]:
        name, checks, violations, _ = line.split()
        rows[name] = (int(checks), int(violations))
    return rows


def test_score_rows() -> None:
    table = "x\ninvariant checks violations worst\n" + "\n".join(
        f"{name} 3 0 1.0s" for name in INVARIANTS
    )
    assert score_rows(table) == dict.fromkeys(INVARIANTS, (3, 0))


def test_chaos_soak_three_minutes() -> None:
    require_root()
    done = subprocess.run(
        [sys.executable, str(SOAK), "--nodes", "6", "--etcd-members", "3",
         "--minutes", "3", "--seed", "1", "--prefix", PREFIX],
        capture_output=True, text=True, timeout=600, check=False, cwd=REPO_ROOT,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-6000:]
    rows = score_rows(done.stdout)
    assert list(rows) == list(INVARIANTS), out[-3000:]
    assert all(checks > 0 for checks, _ in rows.values()), out[-3000:]
    assert all(violations == 0 for _, violations in rows.values()), out[-3000:]
    assert not [n for n in netns_ops.list_netns() if n.startswith(f"{PREFIX}-")]
