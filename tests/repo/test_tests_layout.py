"""tests/ is grouped by package (docs/architecture.md, "Tests"): no test file at its root,
every directory of tests a package, and each one named in that paragraph."""

from __future__ import annotations

import re
from pathlib import Path

from tests.repo_paths import REPO_ROOT

TESTS = REPO_ROOT / "tests"
ARCHITECTURE = REPO_ROOT / "docs" / "architecture.md"


def files_of_tests() -> list[Path]:
    """Every test_*.py under tests/, where pytest looks for tests (`testpaths`)."""
    return sorted(p for p in TESTS.rglob("test_*.py") if "__pycache__" not in p.parts)


def named_directories() -> set[str]:
    """The directories the "Tests" section of docs/architecture.md names (`tests/NAME/`)."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    section = text.split("\n## Tests\n", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"`tests/([a-z0-9_]+)/`", section))


def test_no_test_file_at_the_root_of_tests() -> None:
    at_root = [p.name for p in files_of_tests() if p.parent == TESTS]
    assert at_root == [], (
        f"tests/{at_root[0] if at_root else ''}: move it into the directory of the package "
        "its subject lives in (docs/architecture.md, Tests)"
    )


def test_every_directory_of_tests_is_a_package() -> None:
    missing = sorted(
        str(d.relative_to(REPO_ROOT))
        for p in files_of_tests()
        for d in (p.parent, *p.parent.parents)
        if d.is_relative_to(TESTS) and not (d / "__init__.py").is_file()
    )
    assert missing == [], f"no __init__.py in {sorted(set(missing))}"


def test_every_directory_of_tests_is_named_in_the_architecture() -> None:
    named = named_directories()
    used = {p.relative_to(TESTS).parts[0] for p in files_of_tests() if p.parent != TESTS}
    assert used - named == set(), f"not in docs/architecture.md's Tests: {sorted(used - named)}"
    assert named - used == set(), f"named there but holding no test: {sorted(named - used)}"
