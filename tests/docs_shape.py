"""The shape of the console examples in docs/*.md, to compare with real output.

A doc shows a command (`# cmd` or `$ cmd` in a ```console block) and what it prints,
often cut with `...`. Values change from run to run (times, RTTs, addresses, counts),
so we compare shapes: each printed line reduced to its label (the text before its first
`: `, or the whole line), with addresses, node names and numbers replaced by
placeholders, and its indentation depth. A documented line must be a line the command
prints; a top-level line the command prints must be documented (or cut by a `...` at
depth 0).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_BLOCK_RE = re.compile(r"^```console\n(.*?)^```", re.M | re.S)
_IPV4_RE = re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b")
_NODE_RE = re.compile(r"\b[a-z][a-z0-9-]*\d+/node\d+\b")
_BARE_NODE_RE = re.compile(r"\bnode\d+\b")
_NUMBER_RE = re.compile(r"\d+(?:[.,]\d+)*")


@dataclass(frozen=True)
class Example:
    command: str  # without the prompt
    output: tuple[str, ...]


def examples(markdown: str) -> list[Example]:
    """Every command of every console block with the lines printed after it, up to the
    next command or the first blank line (what follows a blank line is the enclosing
    command's: `lab up` shows the status it ran, then its own `next:` lines)."""
    found: list[Example] = []
    for block in _BLOCK_RE.findall(markdown):
        command: str | None = None
        output: list[str] = []
        ended = False
        for line in block.splitlines():
            if line.startswith(("# ", "$ ")):
                if command is not None:
                    found.append(Example(command, tuple(output)))
                command, output, ended = line[2:].strip(), [], False
            elif not line.strip():
                ended = True
            elif command is not None and not ended:
                output.append(line)
        if command is not None:
            found.append(Example(command, tuple(output)))
    return found


def find_example(markdown: str, command: str, *, after: str = "") -> Example:
    """The first example running `command` (whitespace-insensitive); with `after`, the
    first that follows the example running `after` before any other `lab fault` (the
    story of that fault, not of the next one)."""
    want = " ".join(command.split())
    seen_after = not after
    for example in examples(markdown):
        text = " ".join(example.command.split("  (")[0].split())
        if not seen_after:
            seen_after = text == " ".join(after.split())
            continue
        if after and text.startswith("meshhealth lab fault"):
            break
        if text == want:
            return example
    raise LookupError(f"no example of {command!r}" + (f" after {after!r}" if after else ""))


def line_shape(line: str) -> tuple[int, str] | None:
    """(indentation depth, label) of one printed line; None for blank and `...` lines."""
    stripped = line.strip()
    if not stripped or stripped == "...":
        return None
    depth = (len(line) - len(line.lstrip(" "))) // 2
    label = stripped.split(": ", 1)[0].rstrip(":")
    label = _IPV4_RE.sub("<ip>", label)
    label = _NODE_RE.sub("<node>", label)
    label = _BARE_NODE_RE.sub("<node>", label)
    label = _NUMBER_RE.sub("<n>", label)
    return depth, label


def shapes(lines: tuple[str, ...] | list[str]) -> set[tuple[int, str]]:
    return {s for s in map(line_shape, lines) if s is not None}


def undocumented(example: Example, printed: str) -> set[tuple[int, str]]:
    """Top-level lines the command printed that the example never shows. A `...` line
    stands for lines at its depth and deeper: only one at depth 0 hides top-level ones."""
    if any(line.strip() == "..." and not line.startswith(" ") for line in example.output):
        return set()
    return {s for s in shapes(printed.splitlines()) if s[0] == 0} - shapes(example.output)


def not_printed(example: Example, printed: str) -> set[tuple[int, str]]:
    """Lines the example shows that the command did not print."""
    return shapes(example.output) - shapes(printed.splitlines())
