"""The repository stands alone: nothing in it points to notes kept outside it.

What users and contributors need is in README.md and docs/ (docs/architecture.md for how
the code is built); a pointer to a file that is not in the repository is a dead end.
"""

from __future__ import annotations

from pathlib import Path

from tests.repo_paths import REPO_ROOT

SCANNED = ("README.md", "pyproject.toml", "docs", "meshhealth", "tests", "scripts", "bench",
           "compose", "deploy", ".ci")  # fmt: skip
SUFFIXES = {".md", ".py", ".sh", ".toml", ".yml", ".yaml", ".txt", ".cfg", ".ini", ""}
# Written in two parts so that this file does not match itself.
OUTSIDE_NOTES = (
    *(part + ".md" for part in ("DESIGN", "CONVENTIONS", "REFERENCE")),
    "../" + "shared",
)


def scanned_files() -> list[Path]:
    files: list[Path] = []
    for name in SCANNED:
        path = REPO_ROOT / name
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            files += [
                p
                for p in path.rglob("*")
                if p.is_file() and p.suffix in SUFFIXES and "__pycache__" not in p.parts
            ]
    return sorted(files)


def test_no_pointer_to_notes_outside_the_repository() -> None:
    found = []
    for path in scanned_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            found += [
                f"{path.relative_to(REPO_ROOT)}:{number}: {name}"
                for name in OUTSIDE_NOTES
                if name in line
            ]
    assert found == [], "pointers to notes outside the repository:\n" + "\n".join(found)


def test_the_scan_reads_the_docs_and_the_code() -> None:
    names = {p.relative_to(REPO_ROOT).as_posix() for p in scanned_files()}
    assert {"README.md", "docs/architecture.md", "meshhealth/defaults.py"} <= names
