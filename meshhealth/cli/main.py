"""`meshhealth` entry point: one argparse parser, one module per command group.

Each command module has `register(subparsers)` which adds its parser and sets
`func=<callable(args) -> int>`. Only the chosen command's module is imported (all of
them only for `meshhealth --help` or an unknown command), and command modules import
heavy libraries (etcd3, grpc, rich) inside their run functions: the health
endpoint's `meshhealth responder` process stays small (docs/performance.md, "Process
size"; tests/test_process_size.py).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import NoReturn

from meshhealth import __version__

# Module names under meshhealth.cli, in the order they appear in --help.
COMMAND_MODULES: tuple[str, ...] = (
    "agent_cmd",
    "status_cmd",
    "matrix_cmd",
    "diagnose_cmd",
    "report_cmd",
    "watch_cmd",
    "inspect_cmd",
    "responder_cmd",
    "probe_cmd",
    "lab_cmd",
)

EPILOG = """examples:
  meshhealth status                      what this node sees (cilium-health status)
  meshhealth diagnose                    whose fault it is (reads etcd)
  meshhealth report --since 24h          least available pairs and nodes (reads etcd)
  meshhealth inspect --etcd http://127.0.0.1:2379
  meshhealth probe 127.0.0.1 --icmp      one-shot probe, fping-like
"""


class OneLineErrorParser(argparse.ArgumentParser):
    """Usage errors as one line (what, and where to look), exit 2: no usage dump."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")

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
            module = f"{arg}_cmd"
            return module if module in COMMAND_MODULES else None
    return None


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser; with `argv`, only the command it names is registered (when it names
    one of ours), so only that command's module is imported."""
    parser = OneLineErrorParser(
        prog="meshhealth",
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
