"""Golden files (tests/golden/*.txt): the text output users and their scripts read.

    check_golden("status_healthy.txt", text)

fails when `text` differs from the file. After an intended change of an output,
regenerate the files and review the diff before committing:

    MESHHEALTH_UPDATE_GOLDEN=1 .venv/bin/pytest tests/cli/test_format_status.py
"""

from __future__ import annotations

import os
from pathlib import Path

GOLDEN_DIR = Path(__file__).parent / "golden"
UPDATE_ENV = "MESHHEALTH_UPDATE_GOLDEN"


def check_golden(name: str, text: str) -> None:
    """Compare `text` with tests/golden/`name` (or write it there when updating)."""
    golden = GOLDEN_DIR / name
    if os.environ.get(UPDATE_ENV) == "1":
        golden.write_text(text, encoding="utf-8")
    assert text == golden.read_text(encoding="utf-8"), f"{name} differs (see {UPDATE_ENV})"
