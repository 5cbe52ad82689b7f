"""Fixture: network namespaces made and removed by tests.

`netns_factory` (function scope) hands out a `NetnsFactory`:

    ns = netns_factory.create()                      # "mh<pid>n<k>", lo up, no IPv6 DAD
    netns_factory.veth(a, b, addrs_a=["10.9.0.1/24"], addrs_b=["10.9.0.2/24"])
    netns_factory.ip(a, "route", "add", "10.10.0.0/16", "via", "10.9.0.2")
    netns_factory.nft(b, "table inet t { chain c { type filter hook input priority 0; drop; } }")
    netns_factory.run(a, "fping", "10.9.0.2")        # `ip netns exec a ...`: CompletedProcess
    proc = netns_factory.spawn(a, sys.executable, "-m", "meshhealth", "responder", ...)
    lab = netns_factory.make_lab(live=3, dead=2, live6=1, dead6=1)   # see Lab

On teardown (also when the test failed) every process it spawned is terminated by PID
(SIGTERM, then SIGKILL) and every namespace it made is deleted. Tests skip, with a clear
reason, only when not root: CI runs as root and these tests must run there.

Addresses (10.x, fd00::) exist only inside the namespaces made here; the host namespace
never gets a route to them.
"""

from __future__ import annotations

import ipaddress
import os
import signal
import subprocess
import textwrap
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import pytest

from meshhealth.lab import proc_sys
from meshhealth.lab.netns_ops import CommandError

# Addresses used by make_lab. Every lab lives in its own pair of namespaces, so labs of
# concurrent tests (or pytest processes) never see one another's addresses.
LAB_LINK_V4 = ("10.99.0.1", "10.99.0.2")  # client, target (veth, /24)
LAB_LINK_V6 = ("fd00:99::1", "fd00:99::2")  # client, target (veth, /64)
LAB_LIVE_V4 = ipaddress.IPv4Network("10.100.0.0/16")  # assigned in the target: answer ICMP
LAB_DEAD_V4 = ipaddress.IPv4Network("10.101.0.0/16")  # routed to the target, dropped there
LAB_LIVE_V6 = ipaddress.IPv6Network("fd00:100::/64")
LAB_DEAD_V6 = ipaddress.IPv6Network("fd00:101::/64")

_counter = 0


def _next_name() -> str:
    global _counter  # noqa: PLW0603 - unique names within this pytest process
    _counter += 1
    return f"mh{os.getpid()}n{_counter}"


def _hosts(network: ipaddress.IPv4Network | ipaddress.IPv6Network, count: int) -> list[str]:
    """The first `count` addresses of `network`, skipping .0 / .255 style ends in IPv4."""
    out: list[str] = []
    index = 1
    while len(out) < count:
        addr = network[index]
        index += 1
        if addr.version == 4 and int(addr) & 0xFF in (0, 255):
            continue
        out.append(str(addr))
    return out


@dataclass(frozen=True)
class Lab:
    """Two namespaces joined by a veth: probes run in `client`, targets live in `target`.

    `live`/`live6` are assigned in `target` (the kernel answers ICMP echo there);
    `dead`/`dead6` are routed from `client` to `target`, where an nft rule drops them
    silently (no ICMP error comes back, so probes see "Connection timed out").
    """

    client: str
    target: str
    client_ip: str
    target_ip: str
    client_ip6: str
    target_ip6: str
    live: list[str] = field(default_factory=list)
    dead: list[str] = field(default_factory=list)
    live6: list[str] = field(default_factory=list)
    dead6: list[str] = field(default_factory=list)


class NetnsFactory:
    """Makes namespaces, veths, routes, nft rules and processes; removes them all."""

    def __init__(self) -> None:
        self.namespaces: list[str] = []
        self.processes: list[subprocess.Popen[bytes]] = []
        self._veths = 0

    # --- namespaces --------------------------------------------------------------------
    def create(self) -> str:
        """A new namespace `mh<pid>n<k>` with lo up and IPv6 DAD off; returns its name."""
        name = _next_name()
        _check(["ip", "netns", "add", name])
        self.namespaces.append(name)
        # accept_dad=0 before any interface exists: addresses (link-local too) are usable
        # at once, so IPv6 tests do not race duplicate address detection.
        for key in ("all", "default"):
            self.sysctl(name, f"net.ipv6.conf.{key}.accept_dad", "0")
        self.ip(name, "link", "set", "lo", "up")
        return name

    def sysctl(self, netns: str, key: str, value: str) -> None:
        """Set `key` inside `netns`. In a container /proc/sys is read-only: then the
        command makes /proc/sys/net writable first, in the mount namespace of its own that
        `ip netns exec` gives it (nothing changes for anyone else)."""
        path = "/proc/sys/" + key.replace(".", "/")
        script = (
            '[ -w "$2" ] || { mount --bind /proc/sys/net /proc/sys/net'
            ' && mount -o remount,bind,rw /proc/sys/net; }; echo "$1" > "$2"'
        )
        self.run(netns, "sh", "-c", script, "sh", value, path)

    def ip(self, netns: str, *args: str) -> subprocess.CompletedProcess[str]:
        """`ip -n NETNS ARGS...`; raises with ip's stderr when it fails."""
        return _check(["ip", "-n", netns, *args])

    def ip_batch(self, netns: str, commands: Sequence[str]) -> None:
        """Many `ip` commands in one process (`ip -n NETNS -batch -`), e.g. 1000 addresses."""
        if commands:
            _check(["ip", "-n", netns, "-batch", "-"], input="\n".join(commands) + "\n")

    def veth(
        self,
        netns_a: str,
        netns_b: str,
        *,
        addrs_a: Sequence[str] = (),
        addrs_b: Sequence[str] = (),
        name_a: str | None = None,
        name_b: str | None = None,
    ) -> tuple[str, str]:
        """A veth pair between two namespaces, both ends up; addresses as `IP/PREFIX`.

        IPv6 addresses get `nodad`. Returns the interface names (a's, b's).
        """
        self._veths += 1
        name_a = name_a or f"veth{self._veths}a"
        name_b = name_b or f"veth{self._veths}b"
        # Created directly inside both namespaces: the host never holds the names.
        peer = ["peer", "name", name_b, "netns", netns_b]
        _check(["ip", "link", "add", name_a, "netns", netns_a, "type", "veth", *peer])
        ends = ((netns_a, name_a, addrs_a), (netns_b, name_b, addrs_b))
        macs = [self._mac(netns, dev) for netns, dev, _ in ends]
        for (netns, dev, addrs), peer_mac, (_, _, peer_addrs) in zip(
            ends, reversed(macs), reversed(ends), strict=True
        ):
            # Static neighbours for the peer's addresses: no ARP / neighbour discovery on a
            # fresh link (IPv6 ND needs ~1-2 s to settle), so the first probe gets through.
            neighbours = [
                f"neigh replace {addr.split('/')[0]} lladdr {peer_mac} dev {dev} nud permanent"
                for addr in peer_addrs
            ]
            self.ip_batch(netns, [_addr_cmd(addr, dev) for addr in addrs])
            self.ip(netns, "link", "set", dev, "up")
            self.ip_batch(netns, neighbours)
        return name_a, name_b

    def _mac(self, netns: str, dev: str) -> str:
        """The MAC address of interface `dev` in `netns`."""
        fields = self.ip(netns, "-br", "link", "show", "dev", dev).stdout.split()
        return fields[2]  # "veth1a@if2  DOWN  aa:bb:cc:dd:ee:ff  <BROADCAST,...>"

    def route(self, netns: str, *args: str) -> None:
        """`ip -n NETNS route add ARGS...`, e.g. route(ns, "10.1.0.0/16", "via", "10.9.0.2")."""
        self.ip(netns, "route", "add", *args)

    def nft(self, netns: str, ruleset: str) -> None:
        """Load an nft ruleset (nft -f syntax) inside `netns`."""
        self.run(netns, "nft", "-f", "-", input=textwrap.dedent(ruleset))

    # --- processes ---------------------------------------------------------------------
    def run(
        self,
        netns: str,
        *cmd: str,
        check: bool = True,
        input: str | None = None,
        timeout: float = 30.0,
    ) -> subprocess.CompletedProcess[str]:
        """`ip netns exec NETNS CMD...`, waits; text stdout/stderr captured."""
        argv = ["ip", "netns", "exec", netns, *cmd]
        return _check(argv, check=check, input=input, timeout=timeout)

    def spawn(self, netns: str, *cmd: str, **popen_kwargs: object) -> subprocess.Popen[bytes]:
        """Start a long-running `ip netns exec NETNS CMD...`; terminated on teardown.

        `ip netns exec` execs the command, so the PID is the command's own.
        """
        argv = ["ip", "netns", "exec", netns, *cmd]
        proc: subprocess.Popen[bytes] = subprocess.Popen(argv, **popen_kwargs)  # type: ignore[call-overload]
        self.processes.append(proc)
        return proc

    # --- ready-made topology -----------------------------------------------------------
    def make_lab(self, live: int = 1, dead: int = 1, *, live6: int = 0, dead6: int = 0) -> Lab:
        """client ns <-veth-> target ns with live and silently dropped addresses."""
        client, target = self.create(), self.create()
        c4, t4 = LAB_LINK_V4
        c6, t6 = LAB_LINK_V6
        self.veth(
            client,
            target,
            addrs_a=[f"{c4}/24", f"{c6}/64"],
            addrs_b=[f"{t4}/24", f"{t6}/64"],
            name_a="mhc0",
            name_b="mht0",
        )
        lab = Lab(
            client=client,
            target=target,
            client_ip=c4,
            target_ip=t4,
            client_ip6=c6,
            target_ip6=t6,
            live=_hosts(LAB_LIVE_V4, live),
            dead=_hosts(LAB_DEAD_V4, dead),
            live6=_hosts(LAB_LIVE_V6, live6),
            dead6=_hosts(LAB_DEAD_V6, dead6),
        )
        self.ip_batch(
            client,
            [
                f"route add {LAB_LIVE_V4} via {t4}",
                f"route add {LAB_DEAD_V4} via {t4}",
                f"route add {LAB_LIVE_V6} via {t6}",
                f"route add {LAB_DEAD_V6} via {t6}",
            ],
        )
        self.ip_batch(
            target,
            [_addr_cmd(f"{a}/32", "lo") for a in lab.live]
            + [_addr_cmd(f"{a}/128", "lo") for a in lab.live6],
        )
        # Dead addresses vanish: dropped before routing, so the target never answers and
        # never sends "unreachable" (forwarding is off there too).
        self.nft(
            target,
            f"""
            table inet mhlab {{
              chain prerouting {{
                type filter hook prerouting priority raw; policy accept;
                ip daddr {LAB_DEAD_V4} drop
                ip6 daddr {LAB_DEAD_V6} drop
              }}
            }}
            """,
        )
        return lab

    # --- teardown ----------------------------------------------------------------------
    def close(self) -> None:
        """Terminate spawned processes by PID, then delete every namespace made here."""
        for proc in self.processes:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.processes:
            try:
                proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=3)
        self.processes.clear()
        failed: list[str] = []
        for name in reversed(self.namespaces):
            done = subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
            if done.returncode != 0 and os.path.exists(f"/run/netns/{name}"):
                failed.append(name)
        self.namespaces.clear()
        if failed:
            raise RuntimeError(f"could not delete network namespaces: {', '.join(failed)}")


def _addr_cmd(addr: str, dev: str) -> str:
    if ":" in addr:
        return f"addr add {addr} dev {dev} nodad"
    return f"addr add {addr} dev {dev}"


def _check(
    argv: list[str], *, check: bool = True, input: str | None = None, timeout: float = 30.0
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        argv, capture_output=True, text=True, input=input, timeout=timeout, check=False
    )
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")
    return done


def require_root() -> None:
    """Skip the calling test unless we are root (network namespaces need it)."""
    if os.geteuid() != 0:
        pytest.skip("needs root: creates network namespaces (ip netns add)")


@pytest.fixture(scope="session", autouse=True)
def writable_proc_sys_net() -> Iterator[None]:
    """In a container /proc/sys is read-only, and the tests' namespaces and agents set
    net.* sysctls (ip_forward, an endpoint veth's proxy_arp): as root, /proc/sys/net is
    bind-mounted read-write for the session as `lab up` does (meshhealth/lab/proc_sys.py),
    and put back after. On a host it is writable and nothing is done. Without SYS_ADMIN
    the mount fails, and the tests that write a sysctl fail saying `Read-only file
    system` with the key."""
    if os.geteuid() != 0 or not proc_sys.read_only():
        yield
        return
    try:
        proc_sys.make_writable()
    except CommandError:
        yield
        return
    try:
        yield
    finally:
        proc_sys.undo()


@pytest.fixture
def netns_factory() -> Iterator[NetnsFactory]:
    require_root()
    factory = NetnsFactory()
    try:
        yield factory
    finally:
        factory.close()
