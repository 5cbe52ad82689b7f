"""docs/configuration.md is generated from defaults.py and the agent's option table, and
every value in defaults.py says why it is what it is."""

from __future__ import annotations

from pathlib import Path

from meshhealth import defaults
from meshhealth.agent.config.doc import DOC_PATH, main, read_tunables, render
from meshhealth.agent.config.options import OPTIONS
from tests.repo_paths import REPO_ROOT

SOURCE = Path(defaults.__file__).read_text(encoding="utf-8")


def test_configuration_doc_is_in_step_with_the_code() -> None:
    assert DOC_PATH == REPO_ROOT / "docs" / "configuration.md"
    assert DOC_PATH.read_text(encoding="utf-8") == render(SOURCE), (
        "docs/configuration.md is stale: run .venv/bin/python -m meshhealth.agent.config.doc"
    )


def test_every_default_has_a_section_and_a_reason() -> None:
    tunables = read_tunables(SOURCE)
    public = {name for name in vars(defaults) if name.isupper()}
    assert {t.name for t in tunables} == public
    for tunable in tunables:
        assert tunable.reason, f"defaults.{tunable.name} has no comment saying why"
        assert tunable.section, f"defaults.{tunable.name} is outside a section"


def test_every_option_has_a_row() -> None:
    text = DOC_PATH.read_text(encoding="utf-8")
    for option in OPTIONS:
        assert f"| `{option.flag}" in text and f"| `{option.env}` |" in text


def test_reasons_are_read_from_the_comments_above() -> None:
    source = (
        "# --- one (m) ---\n"
        "# Why A and B.\n"
        "A: Final = 1\n"
        "B: Final = 2 * 3\n"
        "\n"
        "# Why C,\n"
        "# on two lines.\n"
        "C = 'x'\n"
        "# --- two ---\n"
        "D = 4\n"
    )
    got = [(t.section, t.name, t.value, t.reason) for t in read_tunables(source)]
    assert got == [
        ("one (m)", "A", "1", "Why A and B."),
        ("one (m)", "B", "2 * 3", "Why A and B."),
        ("one (m)", "C", "'x'", "Why C, on two lines."),
        ("two", "D", "4", ""),
    ]


def test_check_mode_fails_on_a_stale_file_and_write_mode_fixes_it(tmp_path: Path) -> None:
    target = tmp_path / "configuration.md"
    target.write_text("# old\n", encoding="utf-8")
    assert main(["--check", "--output", str(target)]) == 1
    assert main(["--output", str(target)]) == 0
    assert main(["--check", "--output", str(target)]) == 0
    assert target.read_text(encoding="utf-8") == render(SOURCE)


def test_readme_links_the_configuration_reference() -> None:
    assert "docs/configuration.md" in (REPO_ROOT / "README.md").read_text(encoding="utf-8")
