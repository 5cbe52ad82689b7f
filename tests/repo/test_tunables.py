"""Every tunable lives in meshhealth/defaults.py: no duration constant elsewhere.

A module-level number whose name ends in `_S` (a duration in seconds) is a tunable: it
belongs in defaults.py, in its module's section, with a reason (and docs/configuration.md
shows it). Other modules import it from there. Units are not tunables (`MINUTE_S = 60`).
"""

from __future__ import annotations

import ast

import pytest

from tests.repo_paths import REPO_ROOT

PACKAGE_DIR = REPO_ROOT / "meshhealth"
UNITS = {"MINUTE_S", "HOUR_S", "DAY_S"}


def is_number(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, int | float) and not isinstance(node.value, bool)
    if isinstance(node, ast.BinOp):
        return is_number(node.left) and is_number(node.right)
    if isinstance(node, ast.UnaryOp):
        return is_number(node.operand)
    return False


def durations_outside_defaults(source: str, where: str) -> list[str]:
    found = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if (
            isinstance(target, ast.Name)
            and target.id.lstrip("_").endswith("_S")
            and target.id.lstrip("_") not in UNITS
            and is_number(value)
        ):
            found.append(f"{where}:{node.lineno} {target.id}")
    return found


def test_duration_constants_live_in_defaults() -> None:
    found = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        if path.name != "defaults.py":
            found += durations_outside_defaults(path.read_text(), str(path.name))
    assert found == [], "move these to meshhealth/defaults.py with a reason:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("source", "flagged"),
    [
        ("RETRY_S = 1.0", True),
        ("_PAUSE_S: Final = 0.5", True),
        ("WAIT_S = 2 * 60", True),
        ("MINUTE_S = 60", False),
        ("RETRY_S = defaults.ETCD_ENDPOINT_RETRY_S", False),
        ("def f():\n    LOCAL_S = 1.0", False),
        ("MAX_BYTES = 1024", False),
    ],
)
def test_the_rule_sees_durations(source: str, flagged: bool) -> None:
    assert bool(durations_outside_defaults(source, "m.py")) is flagged
