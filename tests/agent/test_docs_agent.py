"""docs/agent.md documents every agent option: its flag, environment variable and default."""

from __future__ import annotations

import pytest

from meshhealth.agent.config.options import OPTIONS, Option
from meshhealth.agent.config.sources import show_default
from tests.repo_paths import REPO_ROOT

DOC = REPO_ROOT / "docs" / "agent.md"


def _rows() -> dict[str, str]:
    """The options table: flag -> its whole row."""
    rows: dict[str, str] = {}
    for line in DOC.read_text().splitlines():
        if line.startswith("| `--"):
            flag = line.split("`")[1].split()[0]
            rows[flag] = line
    return rows


@pytest.mark.parametrize("option", OPTIONS, ids=lambda o: o.flag)
def test_option_row_has_flag_env_toml_key_and_default(option: Option) -> None:
    rows = _rows()
    assert option.flag in rows, f"docs/agent.md has no row for {option.flag}"
    cells = [cell.strip() for cell in rows[option.flag].strip("|").split("|")]
    assert cells[1] == f"`{option.env}`"
    assert cells[2] == f"`{option.name}`"
    assert cells[3] == show_default(option)


def test_no_row_for_an_option_that_does_not_exist() -> None:
    assert sorted(_rows()) == sorted(option.flag for option in OPTIONS)
