"""The commands `lab up` prints at the end run as shown from the user's shell."""

from __future__ import annotations

import pytest

from meshhealth.cli.invocation import program_invocation
from meshhealth.cli.lab_cmd import next_steps

VENV = "/src/meshhealth/.venv"


@pytest.mark.parametrize(
    ("argv0", "cwd", "path_env", "venv", "expected"),
    [
        # quickstart.sh from the clone: the venv is on PATH only inside the script.
        (f"{VENV}/bin/meshhealth", "/src/meshhealth", f"{VENV}/bin:/usr/bin", VENV,
         ".venv/bin/meshhealth"),
        # ... from another directory: the absolute path.
        (f"{VENV}/bin/meshhealth", "/root", f"{VENV}/bin:/usr/bin", VENV,
         f"{VENV}/bin/meshhealth"),
        # An installed meshhealth, its directory on PATH: the plain name.
        ("/usr/local/bin/meshhealth", "/root", "/usr/local/bin:/usr/bin", None, "meshhealth"),
        # Installed but not on PATH: the path.
        ("/opt/mh/bin/meshhealth", "/root", "/usr/bin", None, "/opt/mh/bin/meshhealth"),
        # Typed with a relative path.
        ("./.venv/bin/meshhealth", "/src/meshhealth", "/usr/bin", VENV, ".venv/bin/meshhealth"),
        # python -m meshhealth
        ("/src/meshhealth/meshhealth/__main__.py", "/src/meshhealth", "/usr/bin", VENV,
         ".venv/bin/python -m meshhealth"),
        ("/src/meshhealth/meshhealth/__main__.py", "/tmp/my dir", "/usr/bin", VENV,
         f"{VENV}/bin/python -m meshhealth"),
    ],
)  # fmt: skip
def test_program_invocation(
    argv0: str, cwd: str, path_env: str, venv: str | None, expected: str
) -> None:
    got = program_invocation(
        argv0, cwd=cwd, executable=f"{VENV}/bin/python", path_env=path_env, venv_prefix=venv
    )
    assert got == expected


def test_paths_with_spaces_are_quoted() -> None:
    got = program_invocation(
        "/tmp/my dir/.venv/bin/meshhealth",
        cwd="/root",
        executable="/usr/bin/python3",
        path_env="/usr/bin",
        venv_prefix="/tmp/my dir/.venv",
    )
    assert got == "'/tmp/my dir/.venv/bin/meshhealth'"


def test_every_next_step_starts_with_the_program() -> None:
    text = next_steps(".venv/bin/meshhealth", " --prefix hd")
    lines = text.splitlines()
    assert lines[0] == "next:"
    for line in lines[1:]:
        assert line.startswith("  .venv/bin/meshhealth lab "), line
        assert "--prefix hd" in line
    assert "(then: .venv/bin/meshhealth lab fault --prefix hd clear)" in text
