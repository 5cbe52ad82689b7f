"""The Kubernetes manifests in deploy/kubernetes/, checked offline.

- Every document parses into the Kubernetes API's own types (the `kubernetes` client's
  models), strictly: an unknown field, a value of the wrong type or a missing required
  field fails (shown below with broken copies of the DaemonSet).
- The container's command line is what the agent's own parser accepts: the image's
  command (compose/node-entrypoint.sh) is run with the DaemonSet's environment
  (downward-API values replaced by samples, the ConfigMap's values, the Secret's files
  in a temporary directory at the volume's mode) and `mount`, `ip` and `meshhealth`
  replaced by stubs that record their arguments; the recorded `meshhealth agent ...`
  goes through `meshhealth`'s parser and load_agent_config.
- Every variable the DaemonSet sets is an agent option's or a documented one.
- The PrometheusRule holds exactly deploy/prometheus/meshhealth.rules.yml's rules.
- The compose lab runs the same image, command and variable names as the DaemonSet.
- The entrypoint still numbers the compose lab's nodes by name; docs/kubernetes.md's
  links resolve.
"""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
import yaml

from meshhealth.agent.config.agent_config import ENV_ETCD_PASSWORD
from meshhealth.agent.config.options import OPTIONS
from meshhealth.agent.config.sources import load_agent_config
from meshhealth.agent.etcd_access import agent_etcd_access
from meshhealth.cli.main import build_parser
from meshhealth.kvstore.secret_files import secret_file_problem
from tests.repo_paths import REPO_ROOT

K8S = REPO_ROOT / "deploy" / "kubernetes"
MANIFEST = K8S / "meshhealth.yaml"
PROMETHEUS_RULE = K8S / "prometheusrule.yaml"
RULES = REPO_ROOT / "deploy" / "prometheus" / "meshhealth.rules.yml"
ENTRYPOINT = REPO_ROOT / "compose" / "node-entrypoint.sh"
DOC = REPO_ROOT / "docs" / "kubernetes.md"

# The client's model of each kind we ship.
MODELS = {
    ("v1", "Namespace"): "V1Namespace",
    ("v1", "ServiceAccount"): "V1ServiceAccount",
    ("v1", "ConfigMap"): "V1ConfigMap",
    ("apps/v1", "DaemonSet"): "V1DaemonSet",
}
# Sample values for the downward API's fields.
DOWNWARD = {"spec.nodeName": "worker-7.example.internal", "status.hostIP": "192.168.7.23"}


# --- parsing into the client's models -------------------------------------------------


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def parse(doc: dict[str, Any]) -> Any:
    """`doc` as the client's model of its kind. The models (pydantic, `extra="forbid"`,
    strict scalar types) raise a ValidationError (a ValueError) for an unknown field, a
    value of the wrong type or a missing required field, naming where."""
    model = getattr(kubernetes.client, MODELS[(doc["apiVersion"], doc["kind"])])
    return model.model_validate(doc)


def by_kind(kind: str) -> dict[str, Any]:
    (found,) = [doc for doc in documents(MANIFEST) if doc["kind"] == kind]
    return found


def container() -> dict[str, Any]:
    (agent,) = by_kind("DaemonSet")["spec"]["template"]["spec"]["containers"]
    return agent  # type: ignore[no-any-return]


def test_every_document_parses_into_the_kubernetes_api_types() -> None:
    kinds = []
    for doc in documents(MANIFEST):
        model = parse(doc)
        assert model.kind == doc["kind"]
        kinds.append(doc["kind"])
        print(f"{doc['kind']}/{doc['metadata']['name']}: parses as {type(model).__name__}")
    assert kinds == ["Namespace", "ServiceAccount", "ConfigMap", "DaemonSet"]
    (rule,) = documents(PROMETHEUS_RULE)
    assert (rule["apiVersion"], rule["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    assert set(rule) == {"apiVersion", "kind", "metadata", "spec"}
    kubernetes.client.V1ObjectMeta.model_validate(rule["metadata"])


def _break_unknown_field(ds: dict[str, Any]) -> None:
    ds["spec"]["template"]["spec"]["hostNetwrok"] = True


def _break_type(ds: dict[str, Any]) -> None:
    ds["spec"]["template"]["spec"]["hostNetwork"] = "yes"


def _break_nested_unknown(ds: dict[str, Any]) -> None:
    ds["spec"]["template"]["spec"]["containers"][0]["securityContext"]["capabilities"]["addd"] = [
        "NET_RAW"
    ]


def _break_required(ds: dict[str, Any]) -> None:
    del ds["spec"]["template"]["spec"]["containers"][0]["name"]


def _break_list(ds: dict[str, Any]) -> None:
    ds["spec"]["template"]["spec"]["containers"][0]["env"] = {"MESHHEALTH_NODE": "x"}


@pytest.mark.parametrize(
    ("breakage", "message"),
    [
        (_break_unknown_field, r"spec\.hostNetwrok\n  Extra inputs are not permitted"),
        (_break_type, r"spec\.hostNetwork\n  Input should be a valid boolean"),
        (_break_nested_unknown, r"capabilities\.addd\n  Extra inputs are not permitted"),
        (_break_required, r"containers\.0\.name\n  Field required"),
        (_break_list, r"containers\.0\.env\n  Input should be a valid list"),
    ],
)
def test_a_broken_daemonset_fails_to_parse(breakage: Any, message: str) -> None:
    broken = copy.deepcopy(by_kind("DaemonSet"))
    breakage(broken)
    with pytest.raises(ValueError, match=message) as caught:
        parse(broken)
    print(f"{breakage.__name__}: {caught.value}")


# --- the container's command line and environment -------------------------------------


def secret_volume() -> dict[str, Any]:
    pod = by_kind("DaemonSet")["spec"]["template"]["spec"]
    (volume,) = pod["volumes"]
    return volume["secret"]  # type: ignore[no-any-return]


def mount_path() -> str:
    (mount,) = container()["volumeMounts"]
    return mount["mountPath"]  # type: ignore[no-any-return]


def daemonset_env(secrets_dir: Path) -> dict[str, str]:
    """The container's environment as the kubelet makes it, the Secret's mount moved to
    `secrets_dir`."""
    config_map = by_kind("ConfigMap")
    env: dict[str, str] = {}
    for item in container()["env"]:
        if "value" in item:
            value = item["value"]
        elif "fieldRef" in item["valueFrom"]:
            value = DOWNWARD[item["valueFrom"]["fieldRef"]["fieldPath"]]
        else:
            ref = item["valueFrom"]["configMapKeyRef"]
            assert ref["name"] == config_map["metadata"]["name"]
            value = config_map["data"][ref["key"]]
        env[item["name"]] = value.replace(mount_path(), str(secrets_dir))
    return env


def make_secret_files(tmp_path: Path) -> Path:
    """The Secret as the kubelet mounts it: one file per key at the volume's mode."""
    secrets = tmp_path / "etcd"
    secrets.mkdir()
    for name in ("ca.crt", "tls.crt", "tls.key", "password"):
        path = secrets / name
        path.write_text("sample\n")
        path.chmod(secret_volume()["defaultMode"])
    return secrets


def entrypoint(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """compose/node-entrypoint.sh with stubs for mount, ip and meshhealth that record
    their arguments in tmp_path/record.NAME."""
    stubs = tmp_path / "bin"
    stubs.mkdir()
    record = tmp_path / "record"
    for name in ("mount", "ip", "meshhealth"):
        stub = stubs / name
        stub.write_text(
            f'#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done > "{record}.{name}"\n'
        )
        stub.chmod(0o755)
    done = subprocess.run(
        ["sh", str(ENTRYPOINT)],
        env={**env, "PATH": f"{stubs}:/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return done


def run_entrypoint(tmp_path: Path, env: dict[str, str]) -> tuple[list[str], str]:
    """The argv the entrypoint execs `meshhealth` with, and what `ip` was asked."""
    done = entrypoint(tmp_path, env)
    assert done.returncode == 0, done.stderr
    record = tmp_path / "record"
    argv = Path(f"{record}.meshhealth").read_text().splitlines()
    ip_args = Path(f"{record}.ip").read_text().replace("\n", " ").strip()
    return argv, ip_args


def test_the_compose_lab_still_numbers_nodes_by_name(tmp_path: Path) -> None:
    argv, ip_args = run_entrypoint(
        tmp_path, {"MESHHEALTH_NODE": "node3", "MESHHEALTH_NODE_IP": "10.79.0.13"}
    )
    assert argv[argv.index("--cidr") + 1] == "10.80.3.0/24"
    assert argv[argv.index("--health-ip") + 1] == "10.80.3.2"
    assert ip_args == "route replace unreachable 10.80.0.0/16"


def test_health_from_node_ip_refuses_an_ipv6_node_ip(tmp_path: Path) -> None:
    done = entrypoint(
        tmp_path,
        {
            "MESHHEALTH_NODE": "w1",
            "MESHHEALTH_NODE_IP": "fd00::7",
            "MH_HEALTH_FROM_NODE_IP": "true",
        },
    )
    assert done.returncode == 1
    assert "MH_HEALTH_FROM_NODE_IP needs an IPv4 NodeIP, got 'fd00::7'" in done.stderr


def test_the_containers_command_line_parses_with_the_agents_parser(tmp_path: Path) -> None:
    env = daemonset_env(make_secret_files(tmp_path))
    argv, ip_args = run_entrypoint(tmp_path, env)
    print("meshhealth-node runs: meshhealth " + " ".join(argv))
    assert argv[0] == "agent"
    assert ip_args == "route replace unreachable 10.80.0.0/16"
    args = build_parser(argv).parse_args(argv)
    config = load_agent_config(vars(args), env)
    assert config.node == DOWNWARD["spec.nodeName"]
    assert config.node_ip == DOWNWARD["status.hostIP"]
    assert config.health_ip == "10.80.7.23"  # MH_POD_NET + the NodeIP's last two bytes
    assert config.cidrs == ("10.80.7.23/32",)
    assert config.health_mode == "netns"
    assert config.route_cidrs is True
    assert config.metrics_listen == ("192.168.7.23", 9962)
    config_map = by_kind("ConfigMap")["data"]
    assert list(config.etcd) == config_map["etcd-endpoints"].split(",")
    assert config.cluster == config_map["cluster"]
    access = agent_etcd_access(config)
    assert access.tls is not None
    assert access.tls.paths() == tuple(
        env[name] for name in ("MESHHEALTH_ETCD_CA", "MESHHEALTH_ETCD_CERT", "MESHHEALTH_ETCD_KEY")
    )
    assert access.auth is not None and access.auth.user == config_map["etcd-user"]
    assert access.auth.password_file == env["MESHHEALTH_ETCD_PASSWORD_FILE"]


def test_the_secret_files_are_private_enough_for_the_agent(tmp_path: Path) -> None:
    assert secret_volume()["defaultMode"] == 0o400
    secrets = make_secret_files(tmp_path)
    for name in ("tls.key", "password"):
        with open(secrets / name) as handle:
            assert secret_file_problem(handle.fileno()) is None
    (secrets / "password").chmod(0o440)  # what the Secret's default 0644-ish modes give
    with open(secrets / "password") as handle:
        assert secret_file_problem(handle.fileno()) is not None


def test_the_downward_api_gives_the_node_name_and_ip() -> None:
    refs = {
        item["name"]: item["valueFrom"]["fieldRef"]["fieldPath"]
        for item in container()["env"]
        if "fieldRef" in item.get("valueFrom", {})
    }
    assert refs == {"MESHHEALTH_NODE": "spec.nodeName", "MESHHEALTH_NODE_IP": "status.hostIP"}


def documented_entrypoint_variables() -> set[str]:
    """MH_* variables of compose/node-entrypoint.sh that docs/kubernetes.md documents."""
    read = set(re.findall(r"\$\{?(MH_[A-Z_]+)", ENTRYPOINT.read_text()))
    documented = set(re.findall(r"`(MH_[A-Z_]+)`", DOC.read_text()))
    return read & documented


def test_every_variable_the_daemonset_sets_is_documented() -> None:
    options = {option.env for option in OPTIONS}
    for item in container()["env"]:
        name = item["name"]
        assert name in options or name in documented_entrypoint_variables(), name
        assert name != ENV_ETCD_PASSWORD  # a password file, never the password in env
        assert f"`{name}`" in DOC.read_text(), f"{name} is not in docs/kubernetes.md"


def test_capabilities_are_the_netns_modes() -> None:
    context = container()["securityContext"]
    assert context["capabilities"] == {
        "drop": ["ALL"],
        "add": ["NET_RAW", "NET_ADMIN", "SYS_ADMIN", "SETUID", "SETGID", "SETPCAP", "KILL"],
    }
    assert context["privileged"] is False
    assert context["allowPrivilegeEscalation"] is False
    pod = by_kind("DaemonSet")["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True
    assert pod["dnsPolicy"] == "ClusterFirstWithHostNet"


def test_probes_use_what_the_agent_serves() -> None:
    agent = container()
    live = agent["livenessProbe"]["httpGet"]
    assert (live["path"], live["port"]) == ("/metrics", 9962)  # the metrics server's path
    assert agent["readinessProbe"]["exec"]["command"] == ["meshhealth", "status"]
    annotations = by_kind("DaemonSet")["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "9962",
        "prometheus.io/path": "/metrics",
    }


# --- the PrometheusRule -----------------------------------------------------------------


def test_the_prometheusrule_holds_the_rule_files_rules() -> None:
    (rule,) = documents(PROMETHEUS_RULE)
    assert rule["spec"] == yaml.safe_load(RULES.read_text())
    done = subprocess.run(
        [sys.executable, str(K8S / "gen-prometheusrule.py")],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert done.stdout == PROMETHEUS_RULE.read_text(), (
        "deploy/kubernetes/prometheusrule.yaml is not gen-prometheusrule.py's output: regenerate it"
    )


# --- the compose lab runs the same thing ------------------------------------------------


# Variables only the DaemonSet sets, and why compose does without them.
DAEMONSET_ONLY = {
    "MESHHEALTH_NODE": "compose: the entrypoint takes the container's host name",
    "MESHHEALTH_NODE_IP": "compose: the entrypoint takes eth0's address",
    "MESHHEALTH_ETCD_USER": "the compose lab's etcd has no users",
    "MESHHEALTH_ETCD_PASSWORD_FILE": "the compose lab's etcd has no users",
    "MH_HEALTH_FROM_NODE_IP": "compose: HealthIP from the node's index (node3 -> .3.2)",
    "MH_POD_NET": "compose: the entrypoint's default, 10.80",
}


@pytest.mark.parametrize("compose_file", ["docker-compose.yml", "docker-compose.ha.yml"])
def test_compose_runs_the_daemonsets_image_command_and_variables(compose_file: str) -> None:
    compose = yaml.safe_load((REPO_ROOT / "compose" / compose_file).read_text())
    node = compose["x-node"]
    assert node["build"]["dockerfile"] == "compose/Dockerfile"
    assert node["image"] == "${MESHHEALTH_IMAGE:-meshhealth:lab}"
    agent = container()
    assert agent["image"] == "meshhealth:lab"
    assert "command" not in agent  # the image's entrypoint, tini
    assert agent["args"] == node["command"] == ["meshhealth-node"]
    compose_names = {name for name in node["environment"] if not name.startswith("ETCDCTL_")}
    daemonset_names = {item["name"] for item in agent["env"]}
    assert compose_names <= daemonset_names
    extra = daemonset_names - compose_names
    if compose_file == "docker-compose.yml":  # no TLS there
        extra -= {"MESHHEALTH_ETCD_CA", "MESHHEALTH_ETCD_CERT", "MESHHEALTH_ETCD_KEY"}
    assert extra == set(DAEMONSET_ONLY)
    assert set(node["cap_add"]) == set(agent["securityContext"]["capabilities"]["add"])


def test_dockerfile_default_command_runs_the_agent() -> None:
    text = (REPO_ROOT / "compose" / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["/usr/bin/tini", "--"]' in text
    assert 'CMD ["meshhealth-node"]' in text
    assert "exec meshhealth agent" in ENTRYPOINT.read_text()
    assert os.access(ENTRYPOINT, os.R_OK)


# --- docs/kubernetes.md -----------------------------------------------------------------


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to dashes (code
    blocks' comment lines are not headings)."""
    anchors = set()
    in_code = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif line.startswith("#") and not in_code:
            title = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower())
            anchors.add(title.replace(" ", "-"))
    return anchors


def test_every_link_of_the_kubernetes_doc_resolves() -> None:
    text = DOC.read_text()
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert links
    for link in links:
        target, _, anchor = link.partition("#")
        path = DOC.parent / target if target else DOC
        assert path.is_file(), link
        if anchor:
            assert anchor in _anchors(path.read_text()), link
    for name in ("meshhealth.yaml", "prometheusrule.yaml", "gen-prometheusrule.py"):
        assert f"deploy/kubernetes/{name}" in text
