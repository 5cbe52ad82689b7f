"""`meshhealth` entry point: one argparse parser, one module per command group.

Each command module has `register(subparsers)` which adds its parser and sets
`func=<callable(args) -> int>`. Only the chosen command's module is imported (all of
them only for `meshhealth --help` or an unknown command), and command modules import
heavy libraries (etcd3, grpc, rich) inside their run functions: the health
endpoint's `meshhealth responder` process stays small (docs/performance.md, "Process
size"; tests/repo/test_process_size.py).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from meshhealth import __version__

# Module names under meshhealth.cli, in the order they appear in --help.
COMMAND_MODULES: tuple[str, ...] = (
    "agent_cmd",
    "status_cmd",
    "matrix_cmd",
    "diagnose_cmd",
    "events_cmd",
    "report_cmd",
    "watch_cmd",
    "inspect_cmd",
    "etcd_roles_cmd",
    "maintenance_cmd",
    "responder_cmd",
    "probe_cmd",
    "lab_cmd",
)

TOP_PROG = "meshhealth"

EPILOG = """examples:
  meshhealth status                      what this node sees (cilium-health status)
  meshhealth diagnose                    whose fault it is (reads etcd)
  meshhealth events --since 2h           what was broken, when, for how long
  meshhealth report --since 24h          least available pairs and nodes (reads etcd)
  meshhealth inspect --etcd http://127.0.0.1:2379
  meshhealth probe 127.0.0.1 --icmp      one-shot probe, fping-like
"""


class OneLineErrorParser(argparse.ArgumentParser):
    """Usage errors as one line (what, and where to look), exit 2: no usage dump.

    A command's parser (and a sub-command's) reports the arguments it does not know
    itself, so the line names the help that has the answer (`meshhealth probe --help`),
    not the top level's."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras and self.prog != TOP_PROG:
            # (a command's parser takes the rest of the line: what it left is its own)
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras

    def _get_formatter(self) -> argparse.HelpFormatter:
        # argparse asks shutil for the width, and shutil loads bz2, lzma and zlib: half
        # a megabyte in every process, the health endpoint's responder included.
        # Every formatter class argparse ships takes `width` (typeshed only declares prog).
        width = terminal_columns() - 2
        return self.formatter_class(prog=self.prog, width=width)  # type: ignore[call-arg]


def terminal_columns() -> int:
    """Columns of the terminal, as shutil.get_terminal_size says (COLUMNS, then stdout's
    terminal, else 80), without importing shutil."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns > 0:
        return columns
    stdout = sys.__stdout__
    try:
        return os.get_terminal_size(stdout.fileno()).columns or 80 if stdout else 80
    except (ValueError, OSError):  # not a terminal, or closed
        return 80


def chosen_command(argv: list[str]) -> str | None:
    """The command `argv` names, or None (no command, or not one of ours). Pure.

    The top-level options (--help, --version) take no value, so the command is the
    first argument that is not an option."""
    for arg in argv:
        if arg == "--":
            return None
        if not arg.startswith("-"):
            module = f"{arg.replace('-', '_')}_cmd"
            return module if module in COMMAND_MODULES else None
    return None


def option_owners(parser: argparse.ArgumentParser, option: str) -> list[str]:
    """The commands (`meshhealth probe`) whose parser knows `option`. Pure."""
    owners: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, command in action.choices.items():
                if option.split("=", 1)[0] in command._option_string_actions:
                    owners.append(f"{parser.prog} {name}")
    return owners


def misplaced_option(argv: Sequence[str], parser: argparse.ArgumentParser) -> str | None:
    """The error line for an option given before any command that belongs to one
    (`meshhealth -c 3 10.0.0.2`): which command has it, and its help. None otherwise."""
    for arg in argv:
        if arg == "--" or not arg.startswith("-"):
            return None  # a command (or not an option) comes first: argparse tells
        if arg.split("=", 1)[0] in parser._option_string_actions:
            continue
        owners = option_owners(parser, arg)
        if not owners:
            return None
        if len(owners) == 1:
            where, helps = owners[0], f"{owners[0]} --help"
        else:
            names = ", ".join(owner.rsplit(" ", 1)[1] for owner in owners)
            where, helps = f"the commands {names}", f"{parser.prog} COMMAND --help"
        return (
            f"{parser.prog}: {arg} is an option of {where}: put it after the command (see {helps})"
        )
    return None


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser; with `argv`, only the command it names is registered (when it names
    one of ours), so only that command's module is imported."""
    parser = OneLineErrorParser(
        prog=TOP_PROG,
        description="Node-to-node connectivity health prober coordinated through etcd.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"meshhealth {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineErrorParser)
    chosen = chosen_command(argv) if argv is not None else None
    for name in (chosen,) if chosen is not None else COMMAND_MODULES:
        module = importlib.import_module(f"meshhealth.cli.{name}")
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    parser = build_parser(argv)
    misplaced = misplaced_option(argv, parser)
    if misplaced is not None:
        print(misplaced, file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        code: int = func(args)
    except KeyboardInterrupt:
        return 130
    return code
