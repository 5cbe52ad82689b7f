"""Usage errors exit 2 with one line on stderr, in every command: the flags argparse
rejects, and the values each command checks itself (before it reaches anything)."""

from __future__ import annotations

import pytest

from meshhealth.cli.common import EXIT_USAGE
from meshhealth.cli.main import COMMAND_MODULES, main

COMMANDS = [name.removesuffix("_cmd").replace("_", "-") for name in COMMAND_MODULES]


@pytest.mark.parametrize("command", COMMANDS)
def test_an_unknown_flag_exits_2_in_one_line(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main([command, "--no-such-flag"])
    assert exited.value.code == EXIT_USAGE == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("meshhealth") and "--help" in err, err


def test_no_command_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == EXIT_USAGE
    assert "COMMAND" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["matrix", "--timeout", "0"], "--timeout must be > 0"),
        (["matrix", "--mesh", "lab2"], "--mesh: expected NAME=URLS"),
        (["matrix", "--cluster", "Not A Name!"], "Not A Name!"),
        (["matrix", "--etcd", "ftp://127.0.0.1:1"], "ftp://127.0.0.1:1"),
        (["matrix", "--timeout", "soon"], "soon"),
        (["matrix", "-o", "yaml"], "yaml"),
        (["diagnose", "--timeout", "0"], "--timeout must be > 0"),
        (["diagnose", "--mesh", "lab2"], "--mesh: expected NAME=URLS"),
        (["status", "-H", "http://127.0.0.1:1"], "only unix://PATH"),
        (["status", "--matrix", "--probe", "-H", "unix:///nonexistent.sock"], "cannot be combined"),
        (["watch", "--poll", "0"], "--poll"),
        (["etcd-roles", "--cluster", "lab1", "--nodes", "node1"], "expected NODE=IP"),
        (["etcd-roles", "--cluster", "lab1", "--nodes", "node1=10.0.0.999"], "10.0.0.999"),
        (["etcd-roles", "--cluster", "Lab!", "--nodes", "node1=10.0.0.1"], "Lab!"),
        (["watch", "--url", "http://127.0.0.1:1"], "expected ws://HOST:PORT"),
        (["watch", "--etcd", "ftp://127.0.0.1:1", "--once"], "--etcd"),
        (["watch", "-H", "unix:///x.sock", "--etcd", "http://127.0.0.1:1"], "not allowed"),
        (["inspect", "--timeout", "-1"], "--timeout must be > 0"),
        (["inspect", "--etcd", "ftp://127.0.0.1:1"], "ftp://127.0.0.1:1"),
        (["responder", "--listen", "nowhere"], "bad --listen"),
        (["maintenance"], "the following arguments are required: ACTION"),
        (["maintenance", "start", "n1", "--for", "8d"], "at most 168h0m0s"),
        (["maintenance", "start", "n1", "--for", "later"], "invalid duration 'later'"),
        (["maintenance", "end", "Bad_Node"], "invalid node name"),
        (["maintenance", "list", "--cluster", "Not A Name!"], "Not A Name!"),
        (["maintenance", "list", "--timeout", "0"], "--timeout must be > 0"),
    ],
)
def test_bad_values_exit_2_in_one_line(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        code = main(argv)
    except SystemExit as exited:  # argparse's own checks
        code = exited.code  # type: ignore[assignment]
    assert code == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err, err
