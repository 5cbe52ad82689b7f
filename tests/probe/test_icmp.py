"""The ICMP pinger against real raw sockets, on loopback and in namespaces made here."""

from __future__ import annotations

import gc
import ipaddress
import os
import socket
import struct
import subprocess
import sys
import textwrap
import time

import pytest
import trio
import trio.testing

from meshhealth.model import ProbeResult, ProbeStatus
from meshhealth.netns import socket_in_netns
from meshhealth.probe import icmp
from meshhealth.probe.icmp import open_pinger
from meshhealth.probe.icmp_match import EchoProbe
from meshhealth.probe.icmp_packet import build_echo_request, checksum, parse_datagram
from meshhealth.probe.icmp_socket import (
    PERMISSION_MESSAGE,
    SO_TIMESTAMPNS,
    TIMESTAMP_CMSG_SPACE,
    enable_kernel_timestamps,
    open_raw_socket,
    receive_delay_s,
)
from tests.plugins.ipv6_loopback import IPV6_LOOPBACK
from tests.plugins.netns import Lab, NetnsFactory
from tests.task_spawns import SpawnCounter

SLACK_S = 0.5  # scheduling slack on a busy CI machine


def require_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: raw ICMP sockets")


def assert_ok(result: ProbeResult, count: int) -> None:
    assert result.status is ProbeStatus.OK, result
    assert (result.sent, result.received, result.loss) == (count, count, 0.0)
    assert len(result.rtts_s) == count
    assert all(0 < rtt < 1 for rtt in result.rtts_s)


def assert_timeout(result: ProbeResult, count: int) -> None:
    assert result.status is ProbeStatus.TIMEOUT, result
    assert (result.sent, result.received, result.loss, result.rtts_s) == (count, 0, 1.0, ())


# --- loopback, no namespaces -------------------------------------------------------------
@pytest.mark.parametrize("ip", ["127.0.0.1", pytest.param("::1", marks=IPV6_LOOPBACK, id="::1")])
async def test_loopback_answers(ip: str) -> None:
    require_root()
    async with open_pinger() as pinger:
        result = await pinger.ping(ip, count=3, interval_s=0.01, timeout_s=1.0)
    assert_ok(result, 3)


def test_the_kernel_stamps_a_reply_with_its_arrival() -> None:
    """SO_TIMESTAMPNS on the pinger's raw socket: a reply read 50 ms after it came in
    says so, which the pinger takes off its arrival (an RTT without the receiver's wait)."""
    require_root()
    sock = open_raw_socket(ipv6=False, netns=None, kernel_filter=True)
    with sock:
        assert enable_kernel_timestamps(sock)
        request = build_echo_request(ipv6=False, identifier=0x4D48, sequence=1, payload=b"ts")
        sock.sendto(request, ("127.0.0.1", 0))
        time.sleep(0.05)  # what is measured: the reply waits in the socket meanwhile
        sock.settimeout(5.0)
        while True:  # the raw socket also sees other echo traffic of this host: ours only
            data, ancdata, _, _ = sock.recvmsg(2048, TIMESTAMP_CMSG_SPACE)
            delay = receive_delay_s(ancdata, time.time())
            icmp = data[(data[0] & 0x0F) * 4 :]
            if icmp[0] == 0 and icmp[4:8] == struct.pack("!HH", 0x4D48, 1):
                break
    assert 0.05 <= delay < 5.0


@pytest.mark.parametrize(
    ("ancdata", "wall_now", "delay"),
    [
        ([(socket.SOL_SOCKET, SO_TIMESTAMPNS, struct.pack("=qq", 100, 250_000_000))], 100.5, 0.25),
        ([], 100.5, 0.0),  # no stamp: the reader's own time stands
        ([(socket.SOL_SOCKET, 99, struct.pack("=qq", 100, 0))], 100.5, 0.0),  # another message
        ([(socket.SOL_SOCKET, SO_TIMESTAMPNS, b"\0" * 8)], 100.5, 0.0),  # cut short
        # the wall clock stepped: back (a negative delay) or far forward: ignored
        ([(socket.SOL_SOCKET, SO_TIMESTAMPNS, struct.pack("=qq", 101, 0))], 100.5, 0.0),
        ([(socket.SOL_SOCKET, SO_TIMESTAMPNS, struct.pack("=qq", 100, 0))], 3700.0, 0.0),
    ],
)
def test_receive_delay_from_the_kernels_stamp(
    ancdata: list[tuple[int, int, bytes]], wall_now: float, delay: float
) -> None:
    assert receive_delay_s(ancdata, wall_now) == pytest.approx(delay)


@pytest.mark.parametrize("bad", ["", "10.0.0", "example.org", "fe80::1%lo", "1.2.3.4/32"])
async def test_invalid_ip_is_a_value_error(bad: str) -> None:
    require_root()
    async with open_pinger() as pinger:
        with pytest.raises(ValueError):
            await pinger.ping(bad)


async def test_closing_ends_receiver_tasks_and_the_pinger() -> None:
    require_root()
    me = trio.lowlevel.current_task()
    before = list(me.child_nurseries)
    async with open_pinger() as pinger:
        assert_ok(await pinger.ping("127.0.0.1", count=1), 1)
        (nursery,) = [n for n in me.child_nurseries if n not in before]
        names = sorted(task.name for task in nursery.child_tasks)
        assert names == ["icmp-receiver-v4", "icmp-timer"]
    assert me.child_nurseries == before
    assert nursery.child_tasks == frozenset()
    with pytest.raises(trio.ClosedResourceError):
        await pinger.ping("127.0.0.1")


async def test_early_replies_leave_no_probe_behind() -> None:
    # Timer entries of answered probes stay in the heap until their (far) deadlines, but
    # must not keep the probes (cookies, result lists, tasks) alive: back-to-back rounds
    # would otherwise pile them up for the garbage collector.
    require_root()
    results: list[ProbeResult] = []
    async with open_pinger() as pinger:

        async def probe(ip: str) -> None:
            results.append(await pinger.ping(ip, count=2, interval_s=0.001, timeout_s=60))

        async with trio.open_nursery() as nursery:
            for i in range(200):
                nursery.start_soon(probe, f"127.0.{i // 250}.{i % 250 + 1}")
        assert pinger.parking.timer_entries == 200  # the final waits, due in 60 s
        gc.collect()
        alive = [o for o in gc.get_objects() if isinstance(o, EchoProbe)]
        assert alive == []
        assert pinger.in_flight == 0
    assert len(results) == 200
    for result in results:
        assert_ok(result, 2)


def test_without_cap_net_raw_the_error_says_so() -> None:
    require_root()
    code = textwrap.dedent(
        """
        import trio
        from meshhealth.probe.icmp import open_pinger
        from meshhealth.probe.icmp_socket import PingerPermissionError
        async def main():
            async with open_pinger() as pinger:
                try:
                    await pinger.ping("127.0.0.1", count=1)
                except PingerPermissionError as exc:
                    print("ERR", exc)
        trio.run(main)
        """
    )
    drop = ["setpriv", "--inh-caps=-net_raw", "--bounding-set=-net_raw"]
    done = subprocess.run(
        [*drop, sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert done.stdout.strip() == f"ERR {PERMISSION_MESSAGE}", done.stderr


# --- our own echo requests are not replies -----------------------------------------------
@pytest.mark.netns
@pytest.mark.parametrize("kernel_filter", [True, False])
@pytest.mark.parametrize("ip", ["127.0.0.1", "::1"])
async def test_own_requests_on_loopback_do_not_count(
    netns_factory: NetnsFactory, monkeypatch: pytest.MonkeyPatch, ip: str, kernel_filter: bool
) -> None:
    # The kernel does not answer echo here, but a raw socket still sees our requests on lo.
    ns = netns_factory.create()
    netns_factory.sysctl(ns, "net.ipv4.icmp_echo_ignore_all", "1")
    netns_factory.sysctl(ns, "net.ipv6.icmp.echo_ignore_all", "1")
    monkeypatch.setattr(icmp, "KERNEL_ICMP_FILTER", kernel_filter)
    v6 = ":" in ip
    family = socket.AF_INET6 if v6 else socket.AF_INET
    proto = socket.IPPROTO_ICMPV6 if v6 else socket.IPPROTO_ICMP
    with socket_in_netns(ns, family, socket.SOCK_RAW, proto) as witness:
        async with open_pinger(netns=ns) as pinger:
            result = await pinger.ping(ip, count=2, interval_s=0.01, timeout_s=0.3)
            identifier = pinger.identifier
        assert_timeout(result, 2)
        # Proof that our requests were there to be (mis)taken: a plain raw socket saw them.
        witness.settimeout(0)
        seen = []
        while True:
            try:
                seen.append(parse_datagram(witness.recv(2048), ipv6=v6))
            except BlockingIOError:
                break
        request_type = 128 if v6 else 8
        ours = [m for m in seen if m and m.type == request_type and m.identifier == identifier]
        assert len(ours) == 2


# --- a lab: live, silently dropped, rejected addresses -----------------------------------
@pytest.mark.netns
@pytest.mark.parametrize("v6", [False, True], ids=["ipv4", "ipv6"])
async def test_live_answer_and_dropped_time_out(netns_factory: NetnsFactory, v6: bool) -> None:
    lab = netns_factory.make_lab(live=0 if v6 else 2, dead=0 if v6 else 2, live6=2, dead6=2)
    live, dead = (lab.live6, lab.dead6) if v6 else (lab.live, lab.dead)
    count, interval_s, timeout_s = 3, 0.05, 0.4
    results: dict[str, ProbeResult] = {}
    async with open_pinger(netns=lab.client) as pinger:

        async def probe(ip: str) -> None:
            results[ip] = await pinger.ping(
                ip, count=count, interval_s=interval_s, timeout_s=timeout_s
            )

        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            for ip in (*live, *dead):
                nursery.start_soon(probe, ip)
        elapsed = trio.current_time() - start
        assert pinger.in_flight == 0
    for ip in live:
        assert_ok(results[ip], count)
    for ip in dead:
        assert_timeout(results[ip], count)
    assert elapsed < (count - 1) * interval_s + timeout_s + SLACK_S
    assert elapsed >= (count - 1) * interval_s + timeout_s  # the dead ones waited it out


@pytest.mark.netns
async def test_a_batch_runs_in_one_task_with_per_probe_deadlines(
    netns_factory: NetnsFactory,
) -> None:
    lab = netns_factory.make_lab(live=3, dead=2, live6=2, dead6=1)
    ips = [*lab.live, *lab.dead, *lab.live6, *lab.dead6]
    dead = {*lab.dead, *lab.dead6}
    timeouts = [0.6 if ip == lab.dead[0] else 0.3 for ip in ips]
    count, interval_s = 2, 0.05
    spawns = SpawnCounter()
    async with open_pinger(netns=lab.client) as pinger:
        for ip in (lab.live[0], lab.live6[0]):  # receivers started outside the count
            pinger.open_socket_for(ip)
        trio.lowlevel.add_instrument(spawns)
        start = trio.current_time()
        ended: dict[int, float] = {}

        def on_result(i: int, result: ProbeResult) -> None:
            ended[i] = trio.current_time() - start

        results = await pinger.ping_batch(
            ips, count=count, interval_s=interval_s, timeout_s=timeouts, on_result=on_result
        )
        elapsed = trio.current_time() - start
        trio.lowlevel.remove_instrument(spawns)
        assert pinger.in_flight == 0
        # every probe live: the batch ends with its last reply, not at a deadline
        start = trio.current_time()
        live_only = await pinger.ping_batch([*lab.live, *lab.live6], count=1, timeout_s=30)
        assert trio.current_time() - start < SLACK_S
    assert spawns.spawned == 0
    for ip, result in zip(ips, results, strict=True):
        if ip in dead:
            assert_timeout(result, count)
        else:
            assert_ok(result, count)
    assert (count - 1) * interval_s + 0.6 <= elapsed < (count - 1) * interval_s + 0.6 + SLACK_S
    # each probe's result is final when its own answers are in or its deadline passed,
    # not when the batch ends
    assert sorted(ended) == list(range(len(ips)))
    for i, ip in enumerate(ips):
        if ip not in dead:
            assert ended[i] < (count - 1) * interval_s + 0.3
        elif ip != lab.dead[0]:
            assert (count - 1) * interval_s + 0.3 <= ended[i] < (count - 1) * interval_s + 0.6
    for result in live_only:
        assert_ok(result, 1)


async def test_batch_arguments_and_bad_addresses() -> None:
    require_root()
    async with open_pinger() as pinger:
        with pytest.raises(ValueError, match="2 timeouts for 1 addresses"):
            await pinger.ping_batch(["127.0.0.1"], timeout_s=[1.0, 2.0])
        results = await pinger.ping_batch(["127.0.0.1", "nope"], count=1)
        assert_ok(results[0], 1)
        assert results[1].status is ProbeStatus.ERROR
        assert (results[1].sent, results[1].detail) == (0, "not an IP address: 'nope'")
        assert await pinger.ping_batch([], count=1) == []
        assert pinger.in_flight == 0


@pytest.mark.netns
async def test_200_concurrent_probes_mixed(netns_factory: NetnsFactory) -> None:
    lab = netns_factory.make_lab(live=80, dead=80, live6=20, dead6=20)
    live = {*lab.live, *lab.live6}
    targets = [*lab.live, *lab.dead, *lab.live6, *lab.dead6]
    assert len(targets) == 200
    count, interval_s, timeout_s = 3, 0.1, 0.5
    results: dict[str, ProbeResult] = {}
    async with open_pinger(netns=lab.client) as pinger:

        async def probe(ip: str) -> None:
            results[ip] = await pinger.ping(
                ip, count=count, interval_s=interval_s, timeout_s=timeout_s
            )

        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            for ip in targets:
                nursery.start_soon(probe, ip)
        elapsed = trio.current_time() - start
        assert pinger.in_flight == 0
    for ip in targets:
        if ip in live:
            assert_ok(results[ip], count)
        else:
            assert_timeout(results[ip], count)
    assert elapsed < timeout_s + count * interval_s + SLACK_S


@pytest.mark.netns
@pytest.mark.parametrize("v6", [False, True], ids=["ipv4", "ipv6"])
async def test_icmp_error_quoting_our_request_is_unreachable(
    netns_factory: NetnsFactory, v6: bool
) -> None:
    lab = netns_factory.make_lab(live=0, dead=0)
    ip, net = ("fd00:102::1", "fd00:102::/64") if v6 else ("10.102.0.1", "10.102.0.0/16")
    netns_factory.route(lab.client, net, "via", lab.target_ip6 if v6 else lab.target_ip)
    netns_factory.ip(lab.target, "addr", "add", ip, "dev", "lo")
    reject = (
        f"ip6 daddr {net} reject with icmpv6 type addr-unreachable"
        if v6
        else f"ip daddr {net} reject with icmp type host-unreachable"
    )
    netns_factory.nft(
        lab.target,
        "table inet mhreject {\n chain input {\n type filter hook input priority 0\n"
        f"    {reject}\n }}\n}}\n",
    )
    async with open_pinger(netns=lab.client) as pinger:
        with trio.fail_after(2):
            result = await pinger.ping(ip, count=2, interval_s=0.05, timeout_s=1.0)
    assert result.status is ProbeStatus.UNREACHABLE, result
    assert result.received == 0
    expected = "address unreachable" if v6 else "host unreachable"
    assert result.detail == f"{expected} from {ip}"  # nft rejects as the local address


@pytest.mark.netns
async def test_local_send_errors(netns_factory: NetnsFactory) -> None:
    lab = netns_factory.make_lab(live=1, dead=0)
    netns_factory.nft(
        lab.client,
        f"""
        table inet mhout {{
          chain output {{
            type filter hook output priority 0
            ip daddr {lab.live[0]} drop
          }}
        }}
        """,
    )
    async with open_pinger(netns=lab.client) as pinger:
        no_route = await pinger.ping("10.250.0.1", count=3, interval_s=0.01, timeout_s=0.3)
        blocked = await pinger.ping(lab.live[0], count=1, timeout_s=0.3)
    assert no_route.status is ProbeStatus.UNREACHABLE, no_route
    assert no_route.detail == "send to 10.250.0.1: Network is unreachable"
    assert (no_route.sent, no_route.received) == (1, 0)
    assert blocked.status is ProbeStatus.ERROR, blocked
    assert blocked.detail == f"send to {lab.live[0]}: Operation not permitted"


# --- cancellation ------------------------------------------------------------------------
@pytest.mark.netns
async def test_cancelled_ping_leaves_no_waiter(netns_factory: NetnsFactory) -> None:
    lab = netns_factory.make_lab(live=1, dead=1)
    async with open_pinger(netns=lab.client) as pinger:
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(pinger.ping, lab.dead[0])
                await trio.testing.wait_all_tasks_blocked()  # the ping sent and is waiting
                assert pinger.in_flight == 1
                scope.cancel()
        assert scope.cancelled_caught
        assert pinger.in_flight == 0
        assert_ok(await pinger.ping(lab.live[0], count=2, interval_s=0.01), 2)


@pytest.mark.netns
async def test_closing_releases_pings_of_other_tasks(netns_factory: NetnsFactory) -> None:
    lab = netns_factory.make_lab(live=0, dead=1)
    errors: list[BaseException] = []

    async def ping_dead(pinger: icmp.Pinger) -> None:
        try:
            await pinger.ping(lab.dead[0], count=1, timeout_s=30)
        except trio.ClosedResourceError as exc:
            errors.append(exc)

    with trio.fail_after(5):  # not the 30 s probe timeout
        async with trio.open_nursery() as outside, open_pinger(netns=lab.client) as pinger:
            outside.start_soon(ping_dead, pinger)
            await trio.testing.wait_all_tasks_blocked()
            assert pinger.in_flight == 1
    assert len(errors) == 1


# --- spoofed, stray, late, duplicated replies --------------------------------------------
ETH_P_IP = 0x0800


def forged_reply(
    src: str, dst: str, *, ident: int, seq: int, payload: bytes, icmp_type: int
) -> bytes:
    message = struct.pack("!BBHHH", icmp_type, 0, 0, ident, seq) + payload
    message = message[:2] + checksum(message).to_bytes(2, "big") + message[4:]
    header = struct.pack(
        "!BBHHHBBH4s4s",
        0x45,
        0,
        20 + len(message),
        0,
        0,
        64,
        socket.IPPROTO_ICMP,
        0,  # the kernel fills in the IP checksum
        ipaddress.IPv4Address(src).packed,
        ipaddress.IPv4Address(dst).packed,
    )
    return header + message


async def echo_forger(
    lab: Lab, behaviour: dict[str, str], *, task_status: trio.TaskStatus[None]
) -> None:
    """In the target namespace: see each echo request on the wire (before the nft drop)
    and answer it with a forged reply whose flaw depends on the destination."""
    sniff = socket_in_netns(lab.target, socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(ETH_P_IP))
    sniff.bind(("mht0", ETH_P_IP))
    send = socket_in_netns(lab.target, socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    with trio.socket.from_stdlib_socket(sniff) as tsniff, send:

        async def answer(packet: bytes, delay_s: float, copies: int) -> None:
            await trio.sleep(delay_s)
            for _ in range(copies):
                send.sendto(packet, (lab.client_ip, 0))

        async with trio.open_nursery() as nursery:
            task_status.started()
            while True:
                data = await tsniff.recv(2048)
                request = parse_datagram(data, ipv6=False)
                dst = socket.inet_ntoa(data[16:20])
                if request is None or request.type != 8 or dst not in behaviour:
                    continue
                kind = behaviour[dst]
                src, ident, payload, icmp_type = dst, request.identifier, request.payload, 0
                if kind == "wrong_cookie":
                    payload = bytes([payload[0] ^ 0xFF]) + payload[1:]
                elif kind == "wrong_source":
                    src = lab.target_ip
                elif kind == "wrong_identifier":
                    ident ^= 1
                elif kind == "echo_request":
                    icmp_type = 8
                reply = forged_reply(
                    src,
                    lab.client_ip,
                    ident=ident,
                    seq=request.sequence,
                    payload=payload,
                    icmp_type=icmp_type,
                )
                delay_s = 0.35 if kind == "late" else 0.0
                copies = 3 if kind == "duplicated" else 1
                nursery.start_soon(answer, reply, delay_s, copies)


@pytest.mark.netns
async def test_forged_replies_do_not_count(netns_factory: NetnsFactory) -> None:
    kinds = ["wrong_cookie", "wrong_source", "wrong_identifier", "echo_request", "late"]
    # "duplicated" is the control: a faithful reply (sent 3 times) proves the forger works.
    lab = netns_factory.make_lab(live=0, dead=len(kinds) + 1)
    behaviour = dict(zip(lab.dead, [*kinds, "duplicated"], strict=True))
    results: dict[str, ProbeResult] = {}
    async with trio.open_nursery() as forger, open_pinger(netns=lab.client) as pinger:
        await forger.start(echo_forger, lab, behaviour)

        async def probe(ip: str) -> None:
            # request 1 is sent at 0.4 s: "late" replies to request 0 (at 0.35 s, deadline
            # 0.3 s) arrive while the probe still waits.
            results[ip] = await pinger.ping(ip, count=2, interval_s=0.4, timeout_s=0.3)

        async with trio.open_nursery() as nursery:
            for ip in lab.dead:
                nursery.start_soon(probe, ip)
        forger.cancel_scope.cancel()
    by_kind = {kind: results[ip] for ip, kind in behaviour.items()}
    for kind in kinds:
        assert by_kind[kind].status is ProbeStatus.TIMEOUT, (kind, by_kind[kind])
        assert by_kind[kind].received == 0, kind
    assert_ok(by_kind["duplicated"], 2)  # 3 copies of each reply count once
