"""Fault injection: nftables rules inside a node's namespace, and process faults.

Every nft fault lives in one table per namespace, `table inet meshhealth_lab`, one base
chain per fault kind, so `fault clear` deletes exactly that table and nothing else.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from typing import Final

from meshhealth.lab import plan as P

ENDPOINT_FORWARD_DROP: Final = "endpoint-forward-drop"
ICMP_DROP: Final = "icmp-drop"
PARTITION: Final = "partition"
KILL_AGENT: Final = "kill-agent"
STOP_ETCD: Final = "stop-etcd"
START_ETCD: Final = "start-etcd"


@dataclass(frozen=True, slots=True)
class FaultKind:
    name: str
    target: str  # "node" or "cluster"
    shows: str  # what the other nodes' `meshhealth status` shows


FAULT_KINDS: Final[dict[str, FaultKind]] = {
    k.name: k
    for k in (
        FaultKind(
            ENDPOINT_FORWARD_DROP,
            "node",
            "Host connectivity OK, Endpoint connectivity timed out (FORWARD drops to the "
            "endpoint, the blog's story)",
        ),
        FaultKind(ICMP_DROP, "node", "ICMP to stack timed out on both paths, HTTP to agent OK"),
        FaultKind(PARTITION, "node", "every path to the node timed out; it sees everyone down"),
        FaultKind(
            KILL_AGENT,
            "node",
            "Host ICMP OK, HTTP to agent refused; the node leaves the probe sets after the "
            "lease TTL",
        ),
        FaultKind(STOP_ETCD, "cluster", "agents keep probing; their status says etcd is down"),
        FaultKind(START_ETCD, "cluster", "agents re-register and publish again"),
    )
}

NFT_KINDS: Final = (ENDPOINT_FORWARD_DROP, ICMP_DROP, PARTITION)
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
    elif kind == PARTITION:
        # Inbound only, like ICMP: nothing reaches the node or its endpoint, and its own
        # packets get no answer (timeouts, not EPERM, on the node itself).
        chains = [
            _chain("partition_in", "input", [f"iifname {link} drop"]),
            _chain("partition_fwd", "forward", [f"iifname {link} drop"]),
        ]
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
