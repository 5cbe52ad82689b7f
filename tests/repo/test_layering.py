"""Imports only go down: the package map of docs/architecture.md, checked on every module.

Every module of meshhealth/ is parsed (ast, nothing is imported), every `import` and
`from ... import` is resolved (relative ones too, and those inside functions or under
TYPE_CHECKING), and each edge is checked against the rules below. A new sub-package is
held to the default rule (it imports neither agent/ nor cli/) until it gets a row.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.repo_paths import REPO_ROOT

PACKAGE_DIR = REPO_ROOT / "meshhealth"

# The layers of the package map, by the first name under `meshhealth.`: a module may
# import its own layer and the layers named here, and nothing else of meshhealth.
FOUNDATION = frozenset(
    {
        "",  # `from meshhealth import __version__`
        "defaults",
        "model",
        "wire",
        "addresses",
        "timefmt",
        "log_format",
        "backoff",
        "netns",
        "metrics",
        "http_server",
        "probe_set",
        "node_address_policy",
        "terminal_text",
        "admin_client",
        "gc_tuning",
        "naming",
        "change_count",
        "etcd_roles",
        "privileges",
        "runtime_metrics",
    }
)
UPPER = {"agent", "cli", "__main__"}  # the process entry points; imported by nobody below

# importer layer -> layers it must never import (besides its own rules further down).
FORBIDDEN: dict[str, frozenset[str]] = {
    "documents": frozenset({"agent", "cli", "lab", "kvstore", "matrix_source", "__main__"}),
    "probe": frozenset({"agent", "cli", "lab", "documents", "matrix_source", "__main__"}),
    "kvstore": frozenset({"agent", "cli", "lab", "documents", "probe", "matrix_source"}),
    "lab": frozenset({"agent", "cli", "documents", "matrix_source", "__main__"}),
    "matrix_source": frozenset(UPPER),
    "agent": frozenset({"cli", "lab", "__main__"}),
    "cli": frozenset({"__main__"}),
    "__main__": frozenset(),  # `python -m meshhealth`: the entry point, imports cli
}
DEFAULT_FORBIDDEN = frozenset(UPPER)  # any other sub-package: imports neither agent nor cli

# Among cli/, only the `agent` command starts an agent in-process; the other commands
# talk to a running agent through its admin API (meshhealth.admin_client) or to etcd.
AGENT_IMPORTERS_IN_CLI = frozenset({"meshhealth.cli.agent_cmd"})


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imported_modules(source: str, module: str, *, is_package: bool) -> Iterator[tuple[int, str]]:
    """(line, absolute module name) of every meshhealth import in `source`."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base if is_package else base[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            yield node.lineno, target
            # `from meshhealth import agent` imports a module by its name (but
            # `from meshhealth import __version__` imports a name, not a module).
            if target == "meshhealth":
                for alias in node.names:
                    if is_module(alias.name):
                        yield node.lineno, f"meshhealth.{alias.name}"


def is_module(name: str) -> bool:
    return (PACKAGE_DIR / name).is_dir() or (PACKAGE_DIR / f"{name}.py").is_file()


def layer(module: str) -> str:
    """`meshhealth.agent.app` -> 'agent'; `meshhealth.wire.keys` -> 'wire'; `meshhealth` -> ''."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def violations(module: str, imports: list[tuple[int, str]]) -> list[str]:
    """The rules, for one module and its imports; each break as `module:line -> target`."""
    found: list[str] = []
    own = layer(module)
    for line, target in imports:
        if not (target == "meshhealth" or target.startswith("meshhealth.")):
            continue
        other = layer(target)
        if other == own or other in ("", "defaults"):
            continue
        why = ""
        if own in FOUNDATION and other not in FOUNDATION:
            why = "a foundation module imports only foundation modules"
        elif other in FORBIDDEN.get(own, DEFAULT_FORBIDDEN):
            why = f"{own or 'meshhealth'} must not import {other}"
        elif other == "agent" and own == "cli" and module not in AGENT_IMPORTERS_IN_CLI:
            why = "only cli/agent_cmd.py among cli/ imports agent/"
        elif other == "cli" and own != "__main__":
            why = "nothing outside cli/ imports cli/"
        if why:
            found.append(f"{module}:{line} -> {target}: {why}")
    return found


def all_modules() -> list[tuple[str, list[tuple[int, str]]]]:
    result = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        module = module_name(path)
        imports = list(
            imported_modules(path.read_text(), module, is_package=path.name == "__init__.py")
        )
        result.append((module, imports))
    return result


def test_no_module_imports_upward() -> None:
    broken = [line for module, imports in all_modules() for line in violations(module, imports)]
    assert broken == [], "upward imports:\n" + "\n".join(broken)


def test_the_checker_sees_the_imports_it_judges() -> None:
    """The rules are not vacuous: the known edges of the package map are found."""
    edges = {(module, target) for module, imports in all_modules() for _, target in imports}
    assert ("meshhealth.cli.agent_cmd", "meshhealth.agent.config.agent_config") in edges
    assert ("meshhealth.__main__", "meshhealth.cli.main") in edges
    assert any(m.startswith("meshhealth.agent.") and t == "meshhealth.kvstore" for m, t in edges)
    assert any(m.startswith("meshhealth.documents.") and t == "meshhealth.model" for m, t in edges)
    assert len(all_modules()) > 50


def test_wire_imports_only_defaults_and_model() -> None:
    """The etcd keys and values (meshhealth/wire/) rest on the model alone (and on
    terminal_text's set of unsafe characters, which every string field refuses), so any
    layer may read and write them."""
    found = [
        f"{module}:{line} -> {target}"
        for module, imports in all_modules()
        if layer(module) == "wire"
        for line, target in imports
        if target.startswith("meshhealth.")
        and layer(target) not in {"wire", "defaults", "model", "terminal_text"}
    ]
    assert found == []


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        ("meshhealth.documents.status", "from meshhealth.cli.common import x", "must not"),
        ("meshhealth.documents.feed", "import meshhealth.agent.app", "must not import agent"),
        ("meshhealth.probe.icmp", "from meshhealth import agent", "must not import agent"),
        ("meshhealth.kvstore.client", "from ..cli import main", "must not import cli"),
        ("meshhealth.cli.status_cmd", "from meshhealth.agent import app", "only cli/agent_cmd"),
        ("meshhealth.agent.app", "from meshhealth.cli.common import x", "must not import cli"),
        ("meshhealth.model", "from meshhealth.probe import stats", "foundation"),
        ("meshhealth.wire.node", "from meshhealth.agent import app", "foundation"),
        ("meshhealth.wire.health", "from meshhealth.documents import x", "foundation"),
        ("meshhealth.web.page", "from meshhealth.cli import main", "must not import cli"),
        ("meshhealth.lab.build", "def f():\n    from meshhealth.agent import app", "agent"),
        ("meshhealth.cli.agent_cmd", "from meshhealth.agent.app import run", None),
        ("meshhealth.agent.app", "from .config import AgentConfig", None),
        ("meshhealth.cli.watch_cmd", "from meshhealth.documents import feed", None),
        ("meshhealth.documents.feed", "from meshhealth.probe.stats import StatsBook", None),
    ],
)
def test_rules_catch_upward_imports(module: str, source: str, expected: str | None) -> None:
    imports = list(imported_modules(source, module, is_package=False))
    found = violations(module, imports)
    if expected is None:
        assert found == []
    else:
        assert len(found) == 1 and expected in found[0], found


def test_relative_imports_resolve_to_absolute_names() -> None:
    got = [
        t
        for _, t in imported_modules(
            "from . import x\nfrom ..kvstore import y", "meshhealth.agent.app", is_package=False
        )
    ]
    assert got == ["meshhealth.agent", "meshhealth.kvstore"]
    got = [
        t
        for _, t in imported_modules(
            "from .client import Etcd", "meshhealth.kvstore", is_package=True
        )
    ]
    assert got == ["meshhealth.kvstore.client"]


# documents/ is the public API's pure core: it builds and reads JSON documents, it does
# no I/O. Of meshhealth it imports the foundation and itself; of the outside world no
# I/O library.
DOCUMENTS_MAY_IMPORT: frozenset[str] = frozenset()
IO_LIBRARIES = frozenset(
    {"trio", "trio_websocket", "socket", "h11", "wsproto", "etcd3", "grpc",
     "subprocess", "asyncio", "urllib", "http"}
)  # fmt: skip


def document_violations(module: str, source: str) -> list[str]:
    found = []
    for line, target in imported_modules(source, module, is_package=False):
        top = target.split(".")[0]
        if top in IO_LIBRARIES:
            found.append(f"{module}:{line} -> {target}: documents/ does no I/O")
        elif top == "meshhealth" and target != "meshhealth":
            other = layer(target)
            allowed = other in FOUNDATION or other == "documents"
            if not allowed and target not in DOCUMENTS_MAY_IMPORT:
                found.append(f"{module}:{line} -> {target}: documents/ imports only the foundation")
    return found


def test_documents_are_pure() -> None:
    paths = sorted((PACKAGE_DIR / "documents").glob("*.py"))
    assert len(paths) >= 4
    broken = [
        line for path in paths for line in document_violations(module_name(path), path.read_text())
    ]
    assert broken == [], "\n".join(broken)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import trio", "no I/O"),
        ("from urllib.parse import urlsplit", "no I/O"),
        ("from meshhealth.kvstore import Etcd", "only the foundation"),
        ("from meshhealth.matrix_source import read_matrix", "only the foundation"),
        ("from meshhealth.agent.app import Agent", "only the foundation"),
        ("from meshhealth.timefmt import iso_time", None),
        ("from .reachability import Reachability", None),
        ("from meshhealth.probe.stats import StatsBook", "only the foundation"),
    ],
)
def test_document_rule_catches(source: str, expected: str | None) -> None:
    found = document_violations("meshhealth.documents.example", source)
    if expected is None:
        assert found == []
    else:
        assert len(found) == 1 and expected in found[0], found
