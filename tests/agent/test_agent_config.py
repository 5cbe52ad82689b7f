"""Agent configuration: precedence flags > env > file > defaults, and clear errors."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from meshhealth import defaults
from meshhealth.agent.config.agent_config import AgentConfig, ConfigError, resolve_config
from meshhealth.agent.config.options import OPTIONS
from meshhealth.agent.config.sources import add_agent_arguments

BASE_FLAGS: dict[str, Any] = {"node_ip": "10.0.0.1", "health_ip": "10.1.0.2", "node": "n1"}


def resolve(
    flags: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
    file_values: dict[str, Any] | None = None,
) -> AgentConfig:
    merged = {**BASE_FLAGS, **(flags or {})}
    return resolve_config(merged, env or {}, file_values or {}, file_name="agent.toml")


def parse_flags(argv: list[str]) -> dict[str, Any]:
    parser = argparse.ArgumentParser()
    add_agent_arguments(parser)
    return vars(parser.parse_args(argv))


def test_defaults_come_from_defaults_module() -> None:
    config = resolve()
    assert config.interval_s == defaults.PROBE_INTERVAL_S
    assert config.timeout_s == defaults.PROBE_TIMEOUT_S
    assert config.http_port == defaults.HTTP_PORT
    assert config.socket == defaults.ADMIN_SOCKET
    assert config.max_in_flight == defaults.MAX_PROBES_IN_FLIGHT
    assert config.lease_ttl_s == defaults.LEASE_TTL_S
    assert config.cluster == defaults.DEFAULT_CLUSTER
    assert config.etcd == (defaults.DEFAULT_ETCD,)
    assert config.metrics_listen is None
    assert config.route_cidrs is False


@pytest.mark.parametrize(
    ("flags", "env", "file_values", "expected_interval"),
    [
        ({}, {}, {"interval_s": 7}, 7.0),
        ({}, {"MESHHEALTH_INTERVAL": "5"}, {"interval_s": 7}, 5.0),
        ({"interval_s": "3"}, {"MESHHEALTH_INTERVAL": "5"}, {"interval_s": 7}, 3.0),
    ],
)
def test_precedence_flag_env_file(
    flags: dict[str, Any],
    env: dict[str, str],
    file_values: dict[str, Any],
    expected_interval: float,
) -> None:
    assert resolve(flags, env, file_values).interval_s == expected_interval


def test_flags_parse_from_argv() -> None:
    flags = parse_flags(
        [
            "--etcd", "http://127.0.0.1:2379,http://127.0.0.2:2379",
            "--cluster", "lab1", "--node", "node1", "--node-ip", "10.77.0.1",
            "--health-ip", "10.78.1.2", "--cidr", "10.78.1.0/24", "--cidr", "fd00:1::/64",
            "--interval", "2", "--timeout", "0.5", "--metrics-listen", "10.77.0.1:9962",
            "--health-mode", "loopback", "--route-cidrs", "--mesh", "lab2=http://10.77.255.2:2379",
        ]
    )  # fmt: skip
    with pytest.raises(ConfigError, match="loopback mode needs a loopback address"):
        resolve_config(flags, {}, {}, file_name="x")
    flags["health_ip"] = "127.0.1.2"
    config = resolve_config(flags, {}, {}, file_name="x")
    assert config.etcd == ("http://127.0.0.1:2379", "http://127.0.0.2:2379")
    assert (config.cluster, config.node, config.node_ip) == ("lab1", "node1", "10.77.0.1")
    assert config.cidrs == ("10.78.1.0/24", "fd00:1::/64")
    assert (config.interval_s, config.timeout_s) == (2.0, 0.5)
    assert config.metrics_listen == ("10.77.0.1", 9962)
    assert config.route_cidrs is True
    assert config.mesh == (("lab2", ("http://10.77.255.2:2379",)),)
    assert config.spread_s == pytest.approx(2.0 * defaults.ROUND_SPREAD_FRACTION)


@pytest.mark.parametrize(
    ("flags", "env", "file_values", "message"),
    [
        ({"interval_s": "-1"}, {}, {}, "--interval: must be a positive number"),
        ({}, {"MESHHEALTH_INTERVAL": "soon"}, {}, "MESHHEALTH_INTERVAL: not a number"),
        ({}, {}, {"intervall": 3}, "agent.toml: unknown key 'intervall'"),
        ({}, {}, {"interval_s": True}, "agent.toml: interval_s: expected a number"),
        ({"node_ip": "10.0.0.300"}, {}, {}, "--node-ip: not an IP address"),
        ({"cidrs": ["10.0.0.1/24"]}, {}, {}, "--cidr: not a CIDR"),
        ({"http_port": "70000"}, {}, {}, "--http-port: not a port number"),
        ({"cluster": "Lab_1"}, {}, {}, "--cluster:"),
        ({"health_mode": "pod"}, {}, {}, "--health-mode: must be one of"),
        ({"timeout_s": "10", "interval_s": "5"}, {}, {}, "--timeout: must be shorter"),
        ({"metrics_listen": "9962"}, {}, {}, "--metrics-listen: expected IP:PORT"),
        ({"etcd": "localhost"}, {}, {}, "--etcd: etcd endpoint needs host:port"),
        ({"mesh": ["lab2"]}, {}, {}, "--mesh: expected NAME=URLS"),
        (
            {"cluster": "lab1", "mesh": ["lab1=http://127.0.0.1:1"]},
            {},
            {},
            "--mesh: 'lab1' is this agent's own cluster",
        ),
        ({"health_mode": "loopback"}, {}, {}, "--health-ip: loopback mode needs"),
        # The same validators as keys, wire fields and the etcd client: refused at start,
        # not later by the registrar with a traceback.
        ({"node_ip": "::ffff:10.0.0.1"}, {}, {}, "--node-ip: invalid IP address .*IPv4-mapped"),
        ({"node_ip": "fe80::1%eth0"}, {}, {}, "--node-ip: invalid IP address .*scoped"),
        (
            {"node_ip_secondary": "10.0.0.9"},
            {},
            {},
            "--node-ip-secondary: must be of the other family than --node-ip",
        ),
        (
            {"node_ip_secondary": "fd77::1", "health_ip": "fd00::2"},
            {},
            {},
            "--health-ip: a dual-stack node's HealthIP is of --node-ip's family",
        ),
        ({"health_ip_secondary": "fd00::2"}, {}, {}, "--health-ip-secondary: needs --node-ip-"),
        (
            {"node_ip_secondary": "fd77::1", "health_ip_secondary": "10.1.0.9"},
            {},
            {},
            "--health-ip-secondary: must be of --node-ip-secondary's family",
        ),
        ({"etcd": "ftp://127.0.0.1:2379"}, {}, {}, "--etcd: etcd endpoint .*unknown scheme"),
        ({"etcd": "::1:2379"}, {}, {}, "--etcd: etcd endpoint .*write IPv6 addresses as"),
        ({"metrics_listen": "[::ffff:10.0.0.1]:9"}, {}, {}, "--metrics-listen: invalid IP"),
        ({}, {}, {"mesh": {"lab2": "http://a:99999"}}, "agent.toml: mesh: etcd endpoint .*port"),
    ],
)
def test_bad_values_name_their_source(
    flags: dict[str, Any], env: dict[str, str], file_values: dict[str, Any], message: str
) -> None:
    pattern = message.replace("(", r"\(").replace("[", r"\[")
    with pytest.raises(ConfigError, match="^" + pattern):
        resolve(flags, env, file_values)


def test_node_ip_required() -> None:
    with pytest.raises(ConfigError, match="--node-ip: required"):
        resolve_config({"node": "n1", "health_mode": "none"}, {}, {})


def test_health_ip_required_unless_mode_none() -> None:
    with pytest.raises(ConfigError, match="--health-ip: required with --health-mode netns"):
        resolve_config({"node": "n1", "node_ip": "10.0.0.1"}, {}, {})
    config = resolve_config({"node": "n1", "node_ip": "10.0.0.1", "health_mode": "none"}, {}, {})
    assert config.health_ip is None


def test_node_defaults_to_short_host_name() -> None:
    config = resolve_config(
        {"node_ip": "10.0.0.1", "health_mode": "none"}, {}, {}, hostname=lambda: "Worker-3.example"
    )
    assert config.node == "worker-3"


def test_mesh_from_env_and_file_table() -> None:
    env_config = resolve(env={"MESHHEALTH_MESH": "lab2=http://127.0.0.2:2379;lab3=h:1,h:2"})
    assert env_config.mesh == (("lab2", ("http://127.0.0.2:2379",)), ("lab3", ("h:1", "h:2")))
    file_config = resolve(file_values={"mesh": {"lab2": ["http://127.0.0.2:2379"]}})
    assert file_config.mesh == (("lab2", ("http://127.0.0.2:2379",)),)


def test_every_option_has_distinct_flag_and_env() -> None:
    flags = [option.flag for option in OPTIONS]
    envs = [option.env for option in OPTIONS]
    assert len(set(flags)) == len(flags)
    assert len(set(envs)) == len(envs)
    assert all(env.startswith("MESHHEALTH_") for env in envs)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--node-ip", "::ffff:10.0.0.1"], "--node-ip: invalid IP address '::ffff:10.0.0.1'"),
        (["--node-ip", "10.0.0.1", "--interval", "soon"], "--interval: not a number: 'soon'"),
    ],
)
def test_bad_flag_is_one_line_and_exit_2(argv: list[str], message: str, tmp_path: Path) -> None:
    """The command as users run it: one line naming the flag, exit 2, nothing started."""
    sock = tmp_path / "agent.sock"
    argv = ["--node", "n1", "--health-mode", "none", "--socket", str(sock), *argv]
    done = subprocess.run(
        [sys.executable, "-m", "meshhealth", "agent", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "MESHHEALTH_ETCD": "http://127.0.0.1:9"},
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"meshhealth agent: {message}")
    assert not sock.exists()


def test_probe_plan_options_from_flag_env_and_file() -> None:
    assert resolve().probe_targets == defaults.PLAN_PROBE_TARGETS
    assert resolve().full_mesh is False
    assert resolve(file_values={"probe_targets": 3}).probe_targets == 3
    assert resolve(env={"MESHHEALTH_PROBE_TARGETS": "4"}).probe_targets == 4
    base = ["--node", "n1", "--node-ip", "10.0.0.1", "--health-ip", "10.1.0.2"]
    flags = parse_flags([*base, "--probe-targets", "7", "--full-mesh"])
    config = resolve_config(flags, {}, {}, file_name="x")
    assert (config.probe_targets, config.full_mesh) == (7, True)
    assert resolve(env={"MESHHEALTH_FULL_MESH": "true"}).full_mesh is True
    assert resolve(file_values={"full_mesh": True}).full_mesh is True


@pytest.mark.parametrize("value", ["0", "-2", "three"])
def test_probe_targets_below_one_is_one_line(value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve({"probe_targets": value})
    assert str(caught.value).startswith("--probe-targets: ")
    assert "\n" not in str(caught.value)


def test_forged_entry_guards_from_flag_env_and_file() -> None:
    assert parse_flags(["--route-cidrs-within", "10.0.0.0/8"])["route_cidrs_within"]
    flags = {"route_cidrs_within": "10.0.0.0/8, fd00::/8"}
    assert resolve(flags).route_cidrs_within == ("10.0.0.0/8", "fd00::/8")
    env = {"MESHHEALTH_ALLOWED_NODE_CIDRS": "10.77.0.0/16"}
    assert resolve(env=env).allowed_node_cidrs == ("10.77.0.0/16",)
    file_config = resolve(file_values={"allowed_node_cidrs": ["10.77.0.0/16", "fd77::/64"]})
    assert file_config.allowed_node_cidrs == ("10.77.0.0/16", "fd77::/64")
    assert resolve().route_cidrs_within == () == resolve().allowed_node_cidrs
    with pytest.raises(ConfigError, match=r"--route-cidrs-within.*not a CIDR"):
        resolve({"route_cidrs_within": "10.0.0.1/8"})


def test_l4_probe_options_from_flag_env_and_file() -> None:
    assert resolve().probe_tcp_ports == ()
    assert resolve().udp_source_ports == defaults.UDP_PROBE_SOURCE_PORTS == 4
    assert resolve().udp_port == defaults.HTTP_PORT
    parsed = parse_flags(["--probe-tcp-ports", "10250, 22,10250", "--udp-source-ports", "0"])
    config = resolve({name: parsed[name] for name in ("probe_tcp_ports", "udp_source_ports")})
    assert config.probe_tcp_ports == (10250, 22)  # in the order given, each once
    assert config.udp_source_ports == 0
    assert resolve(env={"MESHHEALTH_PROBE_TCP_PORTS": ""}).probe_tcp_ports == ()
    assert resolve(file_values={"probe_tcp_ports": [22, 443]}).probe_tcp_ports == (22, 443)
    assert resolve(file_values={"udp_port": 4241}).udp_port == 4241


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"probe_tcp_ports": "22,0"}, "--probe-tcp-ports: must be a positive integer"),
        ({"probe_tcp_ports": "70000"}, "--probe-tcp-ports: not a port number"),
        ({"probe_tcp_ports": "ssh"}, "--probe-tcp-ports: not an integer"),
        ({"probe_tcp_ports": ",".join(str(p) for p in range(1, 10))}, "at most 8 ports, got 9"),
        ({"udp_source_ports": "65"}, "--udp-source-ports: must be 0..64"),
        ({"udp_source_ports": "-1"}, "--udp-source-ports"),
    ],
)
def test_bad_l4_probe_options(values: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        resolve(values)
