"""What each long-running process imports (docs/performance.md, "Process size").

No timing and no RSS figure here: the figures are bench/process_size.py's. These tests
keep the heavy libraries out of the processes that do not use them, by importing what
the process imports in a fresh interpreter and reading `sys.modules`.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.repo_paths import REPO_ROOT

HEAVY = ("trio", "trio_websocket", "etcd3", "grpc", "rich", "msgpack", "asyncio")


def heavy_modules_after(code: str, names: tuple[str, ...] = HEAVY) -> list[str]:
    """Which of `names` a fresh interpreter has imported after running `code`."""
    listed = f"sorted(m for m in {names!r} if m in sys.modules)"
    probe = f"{code}\nimport json, sys\nprint(json.dumps({listed}))"
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    loaded: list[str] = json.loads(out.stdout.splitlines()[-1])
    return loaded


def parse_and_load(argv: list[str]) -> str:
    """Code that parses `argv` as `meshhealth` does (only the command's module loads)."""
    return (
        "from meshhealth.cli.main import build_parser\n"
        f"args = build_parser({argv!r}).parse_args({argv!r})\n"
    )


def test_the_health_endpoint_responder_imports_none_of_them() -> None:
    argv = ["responder", "--listen", "127.0.0.1:0", "--passive", "--exit-with-parent"]
    code = parse_and_load(argv) + "import meshhealth.probe.hello_server\n"
    assert heavy_modules_after(code) == []
    # argparse would load shutil (and with it bz2, lzma, zlib) for the terminal width.
    assert heavy_modules_after(code, ("shutil", "bz2", "lzma", "threading")) == []


@pytest.mark.parametrize(
    "command", ["status", "matrix", "diagnose", "inspect", "probe", "watch", "lab"]
)
def test_a_command_loads_no_other_commands_module(command: str) -> None:
    code = parse_and_load([command, "--help"]).replace("args = ", "try:\n    args = ")
    code += "except SystemExit:\n    pass\nimport sys\n"
    code += "assert 'meshhealth.cli.agent_cmd' not in sys.modules, sorted(sys.modules)\n"
    assert "etcd3" not in heavy_modules_after(code)


def test_the_agent_imports_no_rich_nor_websocket() -> None:
    """rich loads only in `watch`, trio_websocket when the first feed viewer connects;
    netns mode and routes run the `ip` command and import no netlink library."""
    code = parse_and_load(["agent", "--node", "n1"]) + "import meshhealth.agent.app\n"
    code += "import meshhealth.agent.health_endpoint.routes\n"
    loaded = heavy_modules_after(code, (*HEAVY, "pyroute2"))
    assert "pyroute2" not in loaded
    assert "rich" not in loaded
    assert "trio_websocket" not in loaded
    assert "trio" in loaded  # the probe can fail: the agent does load its own libraries


@pytest.mark.parametrize(
    ("argv", "module"),
    [
        (["responder", "--listen", "127.0.0.1"], "responder_cmd"),
        (["lab", "up", "--nodes", "3"], "lab_cmd"),
        (["--version"], None),
        (["-h"], None),
        ([], None),
        (["nope"], None),  # every command registered: argparse lists the choices
        (["--", "agent"], None),
    ],
)
def test_chosen_command(argv: list[str], module: str | None) -> None:
    from meshhealth.cli.main import chosen_command

    assert chosen_command(argv) == module


def test_unknown_command_still_lists_every_command() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "meshhealth", "nope"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 2
    for command in ("agent", "status", "responder", "lab"):
        assert f"'{command}'" in out.stderr, out.stderr
