"""meshhealth.diagnosis is pure: no I/O library, no clock, only the foundation below it.

Time comes in as arguments (`now`, `since`), so every rule is a function of its input.
view.py reads the matrix document (documents/matrix.py), so documents/ is allowed
too; agent/, cli/, kvstore/, probe/ and lab/ are not.
"""

from __future__ import annotations

from tests.repo.test_layering import (
    FOUNDATION,
    IO_LIBRARIES,
    PACKAGE_DIR,
    imported_modules,
    layer,
    module_name,
)

CLOCKS = frozenset({"time", "datetime"})


def diagnosis_violations(module: str, source: str) -> list[str]:
    found = []
    for line, target in imported_modules(source, module, is_package=False):
        top = target.split(".")[0]
        if top in IO_LIBRARIES or top in CLOCKS:
            found.append(f"{module}:{line} -> {target}: diagnosis/ does no I/O, reads no clock")
        elif top == "meshhealth" and target != "meshhealth":
            other = layer(target)
            if other not in FOUNDATION and other not in ("diagnosis", "documents"):
                found.append(f"{module}:{line} -> {target}: diagnosis/ imports the foundation")
    return found


def test_diagnosis_is_pure() -> None:
    paths = sorted((PACKAGE_DIR / "diagnosis").glob("*.py"))
    assert len(paths) >= 8
    broken = [
        line for path in paths for line in diagnosis_violations(module_name(path), path.read_text())
    ]
    assert broken == [], "\n".join(broken)


def test_the_rule_catches() -> None:
    module = "meshhealth.diagnosis.example"
    assert diagnosis_violations(module, "import time")
    assert diagnosis_violations(module, "import trio")
    assert diagnosis_violations(module, "from meshhealth.kvstore import Etcd")
    assert diagnosis_violations(module, "from meshhealth.agent.app import Agent")
    assert not diagnosis_violations(module, "from meshhealth.timefmt import iso_time")
    assert not diagnosis_violations(module, "from .cells import NodeId")
