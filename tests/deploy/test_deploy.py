"""The operator kit in deploy/: alert rules, their unit tests, the Grafana dashboard and
the systemd unit, checked with the real tools (promtool from Debian's `prometheus`,
systemd-analyze from `systemd`; scripts/setup.sh installs both) and against the metrics
a real agent exports."""

from __future__ import annotations

import contextlib
import json
import pwd
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from meshhealth.agent.capability_needs import CapabilityMode, needed_capabilities
from meshhealth.agent.config.agent_config import resolve_config
from meshhealth.lab import netns_ops
from tests.agent_cluster import AgentCluster, wait_for
from tests.plugins.etcd_server import EtcdServer, running_etcd
from tests.plugins.netns import NetnsFactory
from tests.repo_paths import REPO_ROOT

RULES = REPO_ROOT / "deploy" / "prometheus" / "meshhealth.rules.yml"
RULES_TEST = REPO_ROOT / "deploy" / "prometheus" / "meshhealth.rules.test.yml"
DASHBOARD = REPO_ROOT / "deploy" / "grafana" / "meshhealth.json"
UNIT = REPO_ROOT / "deploy" / "systemd" / "meshhealth-agent.service"
TROUBLESHOOTING = REPO_ROOT / "docs" / "troubleshooting.md"

# Metrics that Prometheus itself makes for every scrape target.
PROMETHEUS_METRICS = {"up"}
# The agent's own names and the standard process and Python GC ones it exports too.
METRIC_TOKEN_RE = re.compile(r"\b((?:meshhealth|process|python_gc)_[a-zA-Z0-9_]+)\b")
# Grafana's built-in variables and the dashboard's own, with values that parse.
GRAFANA_VARIABLES = {
    "$__rate_interval": "1m",
    "$__interval": "30s",
    "$__range": "1h",
    "$cluster": ".*",
    "$source": ".*",
    "$target": ".*",
}


def _tool(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} is not installed: run scripts/setup.sh (it installs it)"
    return path


def _run(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False, cwd=cwd)


def _rules() -> list[dict[str, Any]]:
    """alert, expr and runbook_url of every rule. promtool is the YAML parser of record
    (test above); this line reader only picks three fields, without a YAML library."""
    rules: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    lines = RULES.read_text().splitlines()
    for index, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith("- alert: "):
            current = {"alert": stripped.removeprefix("- alert: "), "expr": ""}
            rules.append(current)
        elif current is not None and stripped.startswith("expr:"):
            rest = stripped.removeprefix("expr:").strip()
            if rest == "|":
                body = []
                indent = len(line) - len(line.lstrip()) + 2
                for follow in lines[index + 1 :]:
                    if follow.strip() and len(follow) - len(follow.lstrip()) < indent:
                        break
                    body.append(follow.strip())
                rest = " ".join(body)
            current["expr"] = rest
        elif current is not None and stripped.startswith("runbook_url:"):
            current["runbook_url"] = stripped.split(":", 1)[1].strip().strip('"')
    return rules


def _dashboard() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return doc


def _dashboard_exprs(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, PromQL) for every query target, rows' nested panels included."""
    found: list[tuple[str, str]] = []

    def walk(panels: list[dict[str, Any]]) -> None:
        for panel in panels:
            for target in panel.get("targets", []):
                found.append((panel["title"], target["expr"]))
            walk(panel.get("panels", []))

    walk(doc["panels"])
    return found


def _with_variables(expr: str) -> str:
    for name in sorted(GRAFANA_VARIABLES, key=len, reverse=True):
        expr = expr.replace(name, GRAFANA_VARIABLES[name])
    assert "$" not in expr, f"an unknown Grafana variable in {expr!r}"
    return expr


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to dashes."""
    anchors = set()
    for line in markdown.splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            title = re.sub(r"[^\w\- ]", "", title)
            anchors.add(title.replace(" ", "-"))
    return anchors


# --- alert rules ----------------------------------------------------------------------


def test_promtool_check_rules_accepts_the_rule_file() -> None:
    done = _run(_tool("promtool"), "check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout
    count = int(re.search(r"(\d+) rules found", done.stdout)[1])  # type: ignore[index]
    assert count == len(_rules())


def test_promtool_unit_tests_of_the_rules_pass() -> None:
    done = _run(_tool("promtool"), "test", "rules", RULES_TEST.name, cwd=RULES_TEST.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_alert_has_a_unit_test() -> None:
    tested = set(re.findall(r"alertname: (\w+)", RULES_TEST.read_text()))
    assert {rule["alert"] for rule in _rules()} <= tested


def test_every_runbook_points_to_a_section_of_troubleshooting() -> None:
    anchors = _anchors(TROUBLESHOOTING.read_text())
    rules = _rules()
    assert len(rules) >= 7
    for rule in rules:
        url = rule.get("runbook_url", "")
        page, _, anchor = url.partition("#")
        assert page == "docs/troubleshooting.md", rule
        assert anchor in anchors, f"{rule['alert']}: no section #{anchor} in {TROUBLESHOOTING}"


# --- the dashboard --------------------------------------------------------------------


def test_dashboard_is_in_grafanas_current_schema() -> None:
    doc = _dashboard()
    assert doc["schemaVersion"] >= 39  # Grafana 10.4 / 11
    assert doc["uid"] == "meshhealth"
    ids = [panel["id"] for panel in doc["panels"]]
    assert len(ids) == len(set(ids))
    variables = {v["name"]: v for v in doc["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    for panel in doc["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
            assert panel["targets"], panel["title"]
    titles = " ".join(panel["title"].lower() for panel in doc["panels"])
    for subject in ("reachability", "loss", "rtt distribution", "round duration", "etcd"):
        assert subject in titles


def test_every_dashboard_expression_parses_with_promtool(tmp_path: Path) -> None:
    """promtool has no offline `query`: each expression becomes a recording rule."""
    exprs = _dashboard_exprs(_dashboard())
    variables = [v["definition"] for v in _dashboard()["templating"]["list"] if "definition" in v]
    lines = ["groups:", "  - name: dashboard", "    rules:"]
    for index, (_title, expr) in enumerate(exprs):
        lines += [f"      - record: dashboard:expr_{index}", f"        expr: {json.dumps(expr)}"]
    for index, definition in enumerate(variables):
        # label_values(SELECTOR, label): the selector must parse
        selector = re.fullmatch(r"label_values\((.*), *\w+\)", definition)
        assert selector, definition
        lines += [
            f"      - record: dashboard:variable_{index}",
            f"        expr: {json.dumps(_with_variables(selector[1]))}",
        ]
    rule_file = tmp_path / "dashboard.rules.yml"
    rule_file.write_text(
        "\n".join(_with_variables(line) if "expr:" in line else line for line in lines) + "\n"
    )
    done = _run(_tool("promtool"), "check", "rules", str(rule_file))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(exprs) + len(variables)} rules found" in done.stdout


@pytest.fixture(scope="module")
def exported_metrics(tmp_path_factory: pytest.TempPathFactory) -> Iterator[set[str]]:
    """Every metric name a real agent exposes on /metrics (histograms with their
    _bucket/_sum/_count series), read from its `# TYPE` lines."""
    workdir = tmp_path_factory.mktemp("deploy-agent")
    with running_etcd(EtcdServer()) as etcd, AgentCluster(workdir, etcd.endpoint) as cluster:
        agent = cluster.start("n1")
        text, _ = wait_for(
            agent.metrics_text,
            lambda text: "# TYPE meshhealth_rounds_total" in text,
            60.0,  # generous: a loaded CI machine starts Python slowly
            what="the agent's /metrics",
        )
    names: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            names.add(name)
            if kind == "histogram":
                names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
    assert "meshhealth_node_connectivity_status" in names
    yield names


def _unknown_metrics(expr: str, exported: set[str]) -> set[str]:
    return set(METRIC_TOKEN_RE.findall(expr)) - exported


def test_dashboard_names_only_metrics_the_agent_exports(exported_metrics: set[str]) -> None:
    doc = _dashboard()
    exprs = [expr for _title, expr in _dashboard_exprs(doc)]
    exprs += [v["definition"] for v in doc["templating"]["list"] if "definition" in v]
    used: set[str] = set()
    for expr in exprs:
        assert not _unknown_metrics(expr, exported_metrics), expr
        used |= set(METRIC_TOKEN_RE.findall(expr))
    assert len(used) >= 10  # it charts most of what the agent exports


def test_rules_name_only_metrics_the_agent_exports(exported_metrics: set[str]) -> None:
    for rule in _rules():
        assert not _unknown_metrics(rule["expr"], exported_metrics), rule
        bare = set(re.findall(r"\b([a-z_]+)\{", rule["expr"])) - set(
            METRIC_TOKEN_RE.findall(rule["expr"])
        )
        assert bare <= PROMETHEUS_METRICS, rule


# --- systemd unit ---------------------------------------------------------------------


def test_systemd_analyze_verify_accepts_the_unit(tmp_path: Path) -> None:
    """Verified as installed, with ExecStart pointing at this checkout's meshhealth
    (verify checks the binary exists); any warning (unknown key, bad value) fails."""
    meshhealth = Path(sys.executable).parent / "meshhealth"
    assert meshhealth.exists(), meshhealth
    text = UNIT.read_text()
    assert "ExecStart=/usr/local/bin/meshhealth agent" in text
    unit = tmp_path / UNIT.name
    unit.write_text(text.replace("/usr/local/bin/meshhealth", str(meshhealth)))
    done = _run(_tool("systemd-analyze"), "verify", str(unit))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout + done.stderr == ""


def test_systemd_unit_keeps_only_the_capabilities_the_agent_needs() -> None:
    settings: dict[str, str] = {}
    for line in UNIT.read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            settings[key.strip()] = value.strip()
    assert set(settings["CapabilityBoundingSet"].split()) == {
        "CAP_NET_RAW",  # ICMP
        "CAP_NET_ADMIN",  # veth, routes, forwarding sysctls of the health endpoint
        "CAP_SYS_ADMIN",  # its network namespace
        "CAP_SETUID",  # its responder drops to nobody ...
        "CAP_SETGID",  # ... and nogroup ...
        "CAP_SETPCAP",  # ... with an empty bounding set
        "CAP_KILL",  # stopping that responder, no longer root
    }
    assert settings["NoNewPrivileges"] == "yes"
    assert settings["ProtectSystem"] == "strict"
    assert settings["RuntimeDirectory"] == "meshhealth"  # /run/meshhealth/health.sock
    assert settings["StateDirectory"] == "meshhealth"


def test_systemd_unit_bounding_set_is_what_the_netns_mode_needs() -> None:
    """The unit's CapabilityBoundingSet is the agent's own table for the default mode
    (netns endpoint whose responder drops to nobody, with or without routes)."""
    config = resolve_config(
        {"node": "n1", "node_ip": "10.0.0.1", "health_ip": "10.200.0.2", "route_cidrs": True},
        {},
        {},
    )
    mode = CapabilityMode.of(config, root=True, endpoint_uid=pwd.getpwnam("nobody").pw_uid)
    assert set(_unit_capabilities()) == set(needed_capabilities(mode))


def test_systemd_unit_hardening() -> None:
    text = UNIT.read_text()
    settings = {
        key.strip(): value.strip()
        for key, _, value in (line.partition("=") for line in text.splitlines())
        if not key.startswith("#")
    }
    assert settings["ProtectProc"] == "invisible"
    assert settings["ProtectControlGroups"] == "yes"
    assert settings["PrivateMounts"] == "yes"
    assert "ProcSubset" not in settings  # it would hide /proc/sys/net
    assert "ProtectKernelTunables" not in settings
    # Site-specific guidance, commented out: IP allow list and credentials.
    for commented in ("#IPAddressAllow=", "#IPAddressDeny=any", "#LoadCredential=etcd-key.pem:"):
        assert commented in text
    for name in ("MESHHEALTH_ETCD_KEY=%d/etcd-key.pem", "MESHHEALTH_ETCD_PASSWORD_FILE=%d/"):
        assert name in text


def test_systemd_analyze_verify_accepts_the_units_commented_guidance(tmp_path: Path) -> None:
    """LoadCredential=, the credential paths and IPAddressAllow=/Deny= as an operator
    uncomments them: still a valid unit."""
    meshhealth = Path(sys.executable).parent / "meshhealth"
    text = UNIT.read_text().replace("/usr/local/bin/meshhealth", str(meshhealth))
    for key in ("LoadCredential", "Environment", "IPAddressAllow", "IPAddressDeny"):
        text = text.replace(f"\n#{key}=", f"\n{key}=")
    assert "\nLoadCredential=etcd-key.pem:" in text and "\nIPAddressDeny=any" in text
    unit = tmp_path / UNIT.name
    unit.write_text(text)
    done = _run(_tool("systemd-analyze"), "verify", str(unit))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout + done.stderr == ""


def test_systemd_analyze_security_exposure(tmp_path: Path) -> None:
    """`systemd-analyze security --offline=yes` rates the unit 3.3 or better (3.5 before
    ProtectProc, ProtectControlGroups and PrivateMounts, docs/operations.md)."""
    meshhealth = Path(sys.executable).parent / "meshhealth"
    unit = tmp_path / UNIT.name
    unit.write_text(UNIT.read_text().replace("/usr/local/bin/meshhealth", str(meshhealth)))
    done = _run(_tool("systemd-analyze"), "security", "--offline=yes", str(unit))
    assert done.returncode == 0, done.stdout + done.stderr
    found = re.search(r"Overall exposure level for \S+: (\d+\.\d)", done.stdout)
    assert found is not None, done.stdout[-2000:]
    assert float(found[1]) <= 3.3, done.stdout
    for checked in ("ProtectProc=", "ProtectControlGroups=", "PrivateMounts="):
        line = next(ln for ln in done.stdout.splitlines() if checked in ln)
        assert "✓" in line, line


# --- the unit's capabilities, tried for real --------------------------------------------


def _unit_capabilities() -> list[str]:
    for line in UNIT.read_text().splitlines():
        if line.startswith("CapabilityBoundingSet="):
            return line.partition("=")[2].split()
    raise AssertionError("no CapabilityBoundingSet in the unit")


def _run_agent_with(
    netns_factory: NetnsFactory, tmp_path: Path, capabilities: list[str]
) -> tuple[dict[str, Any] | None, str]:
    """The agent in netns health mode in a namespace of its own, as root restricted to
    `capabilities` and no new privileges (what the unit gives it, via setpriv); etcd
    unreachable (a closed loopback port). Returns its status once its first round has
    probed its own endpoint (None if that never came) and its log."""
    ns, peer = netns_factory.create(), netns_factory.create()
    netns_factory.veth(ns, peer, addrs_a=["10.251.0.1/24"], addrs_b=["10.251.0.254/24"])
    endpoint_ns = f"{ns}-ep"
    sock = tmp_path / f"{ns}.sock"
    log_path = tmp_path / f"{ns}.log"
    bounding = ",".join(["-all", *(f"+{c.removeprefix('CAP_').lower()}" for c in capabilities)])
    argv = [
        *("setpriv", "--no-new-privs", "--bounding-set", bounding, "--"),
        *(sys.executable, "-m", "meshhealth", "agent", "--etcd", "http://127.0.0.1:9"),
        *("--cluster", "c1", "--node", "n1", "--node-ip", "10.251.0.1"),
        *("--cidr", "10.252.0.0/24", "--health-ip", "10.252.0.2", "--health-mode", "netns"),
        *("--health-netns", endpoint_ns, "--socket", str(sock), "--interval", "1"),
        *("--timeout", "0.5"),
    ]
    doc: dict[str, Any] | None = None
    with log_path.open("wb") as log_file:
        proc = netns_factory.spawn(ns, *argv, stdout=log_file, stderr=subprocess.STDOUT)
        try:

            def status() -> dict[str, Any]:
                done = _run(sys.executable, "-m", "meshhealth", "status", "-o", "json",
                            "-H", f"unix://{sock}")  # fmt: skip
                if done.returncode not in (0, 1):
                    raise ValueError(done.stderr)
                found: dict[str, Any] = json.loads(done.stdout)
                return found

            def own_endpoint_probed(found: dict[str, Any]) -> bool:
                node = found["nodes"][0]
                endpoint = node.get("health_endpoint") or {}
                paths = endpoint.get("primary_address", {})
                return all(paths.get(p, {}).get("status", "unknown") != "unknown"
                           for p in ("icmp", "http"))  # fmt: skip

            with contextlib.suppress(AssertionError):
                doc, _ = wait_for(status, own_endpoint_probed, 30.0, what="the first round")
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
            if endpoint_ns in netns_ops.list_netns():  # killed before it cleaned up
                subprocess.run(["ip", "netns", "del", endpoint_ns], check=False, timeout=10)
    return doc, log_path.read_text(errors="replace")


def _own_paths(doc: dict[str, Any] | None) -> dict[str, str]:
    if doc is None:
        return {}
    node = doc["nodes"][0]
    out = {}
    for kind, key in (("host", "host"), ("endpoint", "health_endpoint")):
        addr = (node.get(key) or {}).get("primary_address", {})
        for proto in ("icmp", "http"):
            out[f"{kind} {proto}"] = addr.get(proto, {}).get("status", "absent")
    return out


@pytest.mark.netns
def test_the_units_capabilities_are_enough(netns_factory: NetnsFactory, tmp_path: Path) -> None:
    """With exactly the unit's bounding set the agent probes over ICMP and builds its
    health endpoint (namespace, veth, routes): all four paths to itself answer."""
    doc, log = _run_agent_with(netns_factory, tmp_path, _unit_capabilities())
    assert _own_paths(doc) == dict.fromkeys(
        ("host icmp", "host http", "endpoint icmp", "endpoint http"), "ok"
    ), log[-3000:]
    assert "Permission denied" not in log and "Operation not permitted" not in log


@pytest.mark.netns
@pytest.mark.parametrize(
    ("dropped", "broken"),
    [
        ("CAP_NET_RAW", "host icmp"),  # no raw socket: ICMP paths are errors
        ("CAP_NET_ADMIN", "endpoint http"),  # no veth: the endpoint is never reachable
        ("CAP_SYS_ADMIN", "endpoint http"),  # no namespace: no endpoint
        ("CAP_SETUID", "endpoint http"),  # the responder refuses to serve as root
    ],
)
def test_each_of_the_units_capabilities_is_needed(
    netns_factory: NetnsFactory, tmp_path: Path, dropped: str, broken: str
) -> None:
    capabilities = [c for c in _unit_capabilities() if c != dropped]
    doc, log = _run_agent_with(netns_factory, tmp_path, capabilities)
    assert _own_paths(doc).get(broken) != "ok", log[-3000:]
