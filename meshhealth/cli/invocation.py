"""How to run this `meshhealth` again, as a command the user can paste. Pure.

`meshhealth lab up` ends with the commands to go on with. A new user ran it through
scripts/quickstart.sh, which puts the project's virtualenv on PATH for its own process
only: in the user's shell `meshhealth` is not found. So the commands are printed with the
program as it can be run from the user's shell: by name when the program's directory is
on PATH and is not a virtualenv's (an installed `meshhealth`), else by its path
(relative to the current directory when below it, e.g. `.venv/bin/meshhealth`), and as
`PYTHON -m meshhealth` when it was started that way.
"""

from __future__ import annotations

import os
import shlex


def program_invocation(
    argv0: str, *, cwd: str, executable: str, path_env: str, venv_prefix: str | None
) -> str:
    """The shell words that run meshhealth as this process was run.

    argv0: sys.argv[0]; executable: sys.executable; path_env: $PATH; venv_prefix:
    sys.prefix when running in a virtualenv, else None.
    """
    name = os.path.basename(argv0)
    if name == "__main__.py":  # python -m meshhealth
        return f"{_shown_path(executable, cwd)} -m meshhealth"
    if os.sep not in argv0:
        return argv0
    program = os.path.abspath(os.path.join(cwd, argv0))
    directory = os.path.dirname(program)
    in_venv = venv_prefix is not None and directory == os.path.join(venv_prefix, "bin")
    on_path = any(
        os.path.abspath(entry) == directory for entry in path_env.split(os.pathsep) if entry
    )
    if on_path and not in_venv:
        return name
    return _shown_path(program, cwd)


def _shown_path(path: str, cwd: str) -> str:
    absolute = os.path.abspath(os.path.join(cwd, path))
    base = cwd.rstrip(os.sep) + os.sep
    shown = absolute[len(base) :] if absolute.startswith(base) else absolute
    return shlex.quote(shown)


def this_program() -> str:
    """`program_invocation` for the running process."""
    import sys

    return program_invocation(
        sys.argv[0],
        cwd=os.getcwd(),
        executable=sys.executable,
        path_env=os.environ.get("PATH", ""),
        venv_prefix=sys.prefix if sys.prefix != sys.base_prefix else None,
    )
