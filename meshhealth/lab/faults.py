"""Fault injection: the kinds, nftables rules inside a node's namespace or on the
fabric's bridge (fabric_faults), and process faults.

A node's own faults live in one table per namespace, `table inet meshhealth_lab`, one
base chain per fault kind, so `fault clear` deletes exactly that table and nothing else.
Faults between nodes are a `table bridge` each in the fabric namespace (fabric_faults).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from typing import Final

from meshhealth import defaults
from meshhealth.lab import fabric_faults as F
from meshhealth.lab import plan as P

ENDPOINT_FORWARD_DROP: Final = "endpoint-forward-drop"
ICMP_DROP: Final = "icmp-drop"
UDP_DROP: Final = "udp-drop"
PARTITION: Final = F.PARTITION
EGRESS_DROP: Final = F.EGRESS_DROP
INGRESS_DROP: Final = F.INGRESS_DROP
PATH_DROP: Final = F.PATH_DROP
MTU: Final = F.MTU
LINK_DROP: Final = F.LINK_DROP
KILL_AGENT: Final = "kill-agent"
STARVE: Final = "starve"
STOP_ETCD: Final = "stop-etcd"
START_ETCD: Final = "start-etcd"


@dataclass(frozen=True, slots=True)
class FaultKind:
    name: str
    # what it takes: "node", "cluster" (optional, default lab1), "path" (SRC DST),
    # "groups" (GROUP...), "node-size" (NODE SIZE), "rack" (RACK of a lab with racks)
    target: str
    shows: str  # what the other nodes' `meshhealth status` shows
    finding: str = ""  # the finding `meshhealth diagnose` names (kind), when there is one


FAULT_KINDS: Final[dict[str, FaultKind]] = {
    k.name: k
    for k in (
        FaultKind(
            ENDPOINT_FORWARD_DROP,
            "node",
            "Host connectivity OK, Endpoint connectivity timed out (FORWARD drops to the "
            "endpoint, the blog's story)",
            "endpoint-down",
        ),
        FaultKind(ICMP_DROP, "node", "ICMP to stack timed out on both paths, HTTP to agent OK"),
        FaultKind(
            UDP_DROP,
            "node",
            "UDP to agent timed out (the UDP echo on port 4240/udp); ICMP and HTTP OK",
            "udp-blocked",
        ),
        FaultKind(
            PARTITION,
            "groups",
            "the groups time out on each other (etcd stays reachable from all)",
            "partition",
        ),
        FaultKind(
            EGRESS_DROP,
            "node",
            "the node's own probes to its peers time out; everybody reaches it",
            "egress-blocked",
        ),
        FaultKind(
            INGRESS_DROP,
            "node",
            "every probe to the node times out; its own probes pass",
            "ingress-blocked",
        ),
        FaultKind(
            PATH_DROP,
            "path",
            "SRC's probes to DST time out; every other path (DST to SRC too) is fine",
            "path",
        ),
        FaultKind(
            MTU,
            "node-size",
            "small probes pass; IP packets longer than SIZE to or from the node are lost",
            "mtu-blackhole",
        ),
        FaultKind(
            LINK_DROP,
            "rack",
            "every path between RACK and the other racks times out (etcd too, for RACK's "
            "nodes); a trace from another rack stops after the router",
        ),
        FaultKind(
            KILL_AGENT,
            "node",
            "Host ICMP OK, HTTP to agent refused; after the lease TTL the node stays in view "
            "as agent-down for --agent-down-retention",
            "agent-down",
        ),
        FaultKind(
            STARVE,
            "node",
            f"the agent runs in fits (SIGSTOP {defaults.LAB_STARVE_STOP_S:g}s of every "
            f"{defaults.LAB_STARVE_PERIOD_S:g}s): its probes and answers come late",
            "agent-down",  # its agent answers HTTP late (or observer-degraded: late reports)
        ),
        FaultKind(STOP_ETCD, "cluster", "agents keep probing; their status says etcd is down"),
        FaultKind(START_ETCD, "cluster", "agents re-register and publish again"),
    )
}

NFT_KINDS: Final = (ENDPOINT_FORWARD_DROP, ICMP_DROP, UDP_DROP)
FABRIC_KINDS: Final = F.FABRIC_KINDS
_ECHO: Final = "icmp type { echo-request, echo-reply }"


def _chain(name: str, hook: str, rules: list[str]) -> str:
    body = "".join(f"    {r}\n" for r in rules)
    return (
        f"  chain {name} {{\n"
        f"    type filter hook {hook} priority filter; policy accept;\n{body}  }}\n"
    )


def nft_script(kind: str, node: P.NodePlan) -> str:
    """The nft script (for `nft -f -` in the node's namespace) that injects `kind`."""
    link = f'"{P.NODE_IFACE}"'
    chains: list[str]
    if kind == ENDPOINT_FORWARD_DROP:
        chains = [_chain("endpoint_forward_drop", "forward", [f"ip daddr {node.health_ip} drop"])]
    elif kind == ICMP_DROP:
        # Inbound only: echo requests and replies die on arrival, in both directions of
        # the story; nothing is dropped on output, where the sender would see EPERM
        # instead of a timeout.
        chains = [
            _chain("icmp_drop_in", "input", [f"iifname {link} {_ECHO} drop"]),
            _chain("icmp_drop_fwd", "forward", [f"iifname {link} {_ECHO} drop"]),
        ]
    elif kind == UDP_DROP:
        # Inbound only, to the UDP echo's port: peers' echo requests die on arrival; the
        # node's own probes (to that port elsewhere) and their replies (from it) pass.
        udp = f"udp dport {defaults.UDP_ECHO_PORT}"
        chains = [_chain("udp_drop_in", "input", [f"iifname {link} {udp} drop"])]
    else:
        raise ValueError(f"{kind!r} is not an nftables fault (have {', '.join(NFT_KINDS)})")
    return f"table inet {P.NFT_TABLE} {{\n{''.join(chains)}}}\n"


def _nft(
    netns: str, args: list[str], script: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ip", "netns", "exec", netns, "nft", *args],
        input=script,
        check=False,
        capture_output=True,
        text=True,
        timeout=10,
    )


def apply_nft(kind: str, node: P.NodePlan) -> None:
    done = _nft(node.netns, ["-f", "-"], nft_script(kind, node))
    if done.returncode != 0:
        raise RuntimeError(f"nft in {node.netns} failed: {done.stderr.strip()}")


def clear_nft(netns: str) -> bool:
    """Delete the lab's table in `netns`; False when there was none."""
    done = _nft(netns, ["delete", "table", "inet", P.NFT_TABLE])
    return done.returncode == 0


def list_nft(netns: str) -> str:
    done = _nft(netns, ["list", "table", "inet", P.NFT_TABLE])
    return done.stdout if done.returncode == 0 else ""


def apply_fabric(netns: str, script: str) -> None:
    done = _nft(netns, ["-f", "-"], script)
    if done.returncode != 0:
        raise RuntimeError(f"nft in {netns} failed: {done.stderr.strip()}")


def clear_fabric(netns: str, table: str) -> bool:
    """Delete one fault's bridge table in the fabric namespace; False when it was gone."""
    return _nft(netns, ["delete", "table", "bridge", table]).returncode == 0


def clear_router(netns: str, table: str) -> bool:
    """Delete one link-drop table in the router namespace; False when it was gone."""
    return _nft(netns, ["delete", "table", "inet", table]).returncode == 0


def router_tables(netns: str) -> list[str]:
    """The lab's link-drop tables in the router namespace."""
    done = _nft(netns, ["list", "tables", "inet"])
    names = [line.split()[-1] for line in done.stdout.splitlines() if line.startswith("table ")]
    return [n for n in names if n.startswith(f"{P.NFT_TABLE}_")]


def fabric_tables(netns: str) -> list[str]:
    """The lab's bridge tables in the fabric namespace (faults a crash left unrecorded)."""
    done = _nft(netns, ["list", "tables", "bridge"])
    names = [line.split()[-1] for line in done.stdout.splitlines() if line.startswith("table ")]
    return [n for n in names if n.startswith(f"{P.NFT_TABLE}_")]
