"""The pinger's BPF filter (meshhealth.probe.icmp_bpf): the program run in a small
classic-BPF interpreter over a table of datagrams (pure), then attached for real to a
raw socket in a namespace made here, counting what its `recv` gets."""

from __future__ import annotations

import socket
import struct
import time

import pytest

from meshhealth.netns import socket_in_netns
from meshhealth.probe import icmp_bpf
from meshhealth.probe.icmp_bpf import ACCEPT, DROP, Instruction, program
from meshhealth.probe.icmp_packet import checksum
from meshhealth.probe.icmp_socket import open_raw_socket
from tests.plugins.netns import NetnsFactory

OURS, OTHER = 0x4D48, 0x4D49


def run(instructions: list[Instruction], packet: bytes) -> int:
    """What the kernel's classic BPF returns for `packet` (the opcodes `program` uses);
    a load past the end drops, as in the kernel."""
    a = x = pc = 0
    while True:
        ins = instructions[pc]
        pc += 1
        cls, size, mode = ins.code & 0x07, ins.code & 0x18, ins.code & 0xE0
        if cls in (icmp_bpf.BPF_LD, icmp_bpf.BPF_LDX):
            offset = ins.k + (x if mode == icmp_bpf.BPF_IND else 0)
            width = {icmp_bpf.BPF_B: 1, icmp_bpf.BPF_H: 2, icmp_bpf.BPF_W: 4}[size]
            if offset + width > len(packet):
                return DROP
            value = int.from_bytes(packet[offset : offset + width], "big")
            if cls == icmp_bpf.BPF_LDX:
                assert mode == icmp_bpf.BPF_MSH
                x = 4 * (value & 0x0F)
            else:
                assert mode in (icmp_bpf.BPF_ABS, icmp_bpf.BPF_IND)
                a = value
        elif cls == icmp_bpf.BPF_ALU:
            operand = x if ins.code & icmp_bpf.BPF_X else ins.k
            op = ins.code & 0xF0
            a = {
                icmp_bpf.BPF_ADD: a + operand,
                icmp_bpf.BPF_AND: a & operand,
                icmp_bpf.BPF_LSH: a << operand,
            }[op] & 0xFFFFFFFF
        elif cls == icmp_bpf.BPF_MISC:
            x = a
        elif cls == icmp_bpf.BPF_JMP:
            pc += ins.jt if a == ins.k else ins.jf
        else:
            assert cls == icmp_bpf.BPF_RET
            return ins.k


def icmp(icmp_type: int, identifier: int, rest: bytes = b"cookie-0123456789") -> bytes:
    return struct.pack("!BBHHH", icmp_type, 0, 0, identifier, 7) + rest


def ipv4(message: bytes, options: bytes = b"") -> bytes:
    ihl = 5 + len(options) // 4
    header = struct.pack("!BBHHHBBH4s4s", 0x40 | ihl, 0, 20 + len(options) + len(message),
                         1, 0, 64, 1, 0, b"\x0a\0\0\x02", b"\x0a\0\0\x01")  # fmt: skip
    return header + options + message


def error_v4(quoted_identifier: int, quoted_options: bytes = b"") -> bytes:
    quoted = ipv4(icmp(8, quoted_identifier, b""), quoted_options)  # header + 8 bytes
    return struct.pack("!BBHI", 3, 1, 0, 0) + quoted


def error_v6(quoted_identifier: int) -> bytes:
    quoted = bytes([0x60]) + bytes(39) + icmp(128, quoted_identifier, b"")
    return struct.pack("!BBHI", 1, 3, 0, 0) + quoted


OPTIONS = b"\x01\x01\x01\x00"  # NOP NOP NOP EOL: a 24-byte header


@pytest.mark.parametrize(
    ("ipv6", "packet", "verdict"),
    [
        pytest.param(False, ipv4(icmp(0, OURS)), ACCEPT, id="v4 reply ours"),
        pytest.param(False, ipv4(icmp(0, OTHER)), DROP, id="v4 reply other"),
        pytest.param(False, ipv4(icmp(0, OURS), OPTIONS), ACCEPT, id="v4 reply ours, options"),
        pytest.param(False, ipv4(icmp(0, OTHER), OPTIONS), DROP, id="v4 reply other, options"),
        pytest.param(False, ipv4(icmp(8, OURS)), DROP, id="v4 our own request"),
        pytest.param(False, ipv4(icmp(11, OURS)), DROP, id="v4 time exceeded"),
        pytest.param(False, ipv4(error_v4(OURS)), ACCEPT, id="v4 unreachable quoting ours"),
        pytest.param(False, ipv4(error_v4(OTHER)), DROP, id="v4 unreachable quoting other"),
        pytest.param(
            False, ipv4(error_v4(OURS, OPTIONS), OPTIONS), ACCEPT, id="v4 unreachable, options"
        ),
        pytest.param(
            False, ipv4(error_v4(OTHER, OPTIONS)), DROP, id="v4 unreachable other, options"
        ),
        pytest.param(False, ipv4(error_v4(OURS))[:-4], DROP, id="v4 unreachable truncated"),
        pytest.param(False, ipv4(icmp(0, OURS))[:25], DROP, id="v4 reply truncated"),
        pytest.param(True, icmp(129, OURS), ACCEPT, id="v6 reply ours"),
        pytest.param(True, icmp(129, OTHER), DROP, id="v6 reply other"),
        pytest.param(True, icmp(128, OURS), DROP, id="v6 our own request"),
        pytest.param(True, icmp(135, OURS), DROP, id="v6 neighbour solicitation"),
        pytest.param(True, error_v6(OURS), ACCEPT, id="v6 unreachable quoting ours"),
        pytest.param(True, error_v6(OTHER), DROP, id="v6 unreachable quoting other"),
        pytest.param(True, error_v6(OURS)[:50], DROP, id="v6 unreachable truncated"),
    ],
)
def test_program(ipv6: bool, packet: bytes, verdict: int) -> None:
    assert run(program(OURS, ipv6=ipv6), packet) == verdict


def test_program_refuses_a_bad_identifier() -> None:
    with pytest.raises(ValueError, match="16 bits"):
        program(0x10000, ipv6=False)


def _with_checksum(message: bytes, ipv6: bool) -> bytes:
    if ipv6:  # the kernel computes ICMPv6 checksums of raw sockets
        return message
    return message[:2] + struct.pack("!H", checksum(message)) + message[4:]


def _drain(sock: socket.socket) -> list[bytes]:
    got = []
    while True:
        try:
            got.append(sock.recv(65536))
        except BlockingIOError:
            return got


@pytest.mark.netns
@pytest.mark.parametrize("ipv6", [False, True], ids=["ipv4", "ipv6"])
def test_only_our_identifier_reaches_recv(netns_factory: NetnsFactory, ipv6: bool) -> None:
    """Echo replies and unreachable errors for our identifier and for another, sent on
    the namespace's loopback: a plain raw socket (the witness) gets all of them, the
    pinger's socket (types and BPF filter) only ours."""
    ns = netns_factory.create()
    family = socket.AF_INET6 if ipv6 else socket.AF_INET
    proto = socket.IPPROTO_ICMPV6 if ipv6 else socket.IPPROTO_ICMP
    target = "::1" if ipv6 else "127.0.0.1"
    reply = 129 if ipv6 else 0
    error = error_v6 if ipv6 else error_v4
    messages = [
        icmp(reply, OURS),
        icmp(reply, OTHER),
        icmp(reply, OTHER),
        error(OURS),
        error(OTHER),
    ]
    filtered = open_raw_socket(ipv6=ipv6, netns=ns, kernel_filter=True, identifier=OURS)
    witness = socket_in_netns(ns, family, socket.SOCK_RAW, proto)
    sender = socket_in_netns(ns, family, socket.SOCK_RAW, proto)
    with filtered, witness, sender:
        witness.setblocking(False)
        for message in messages:
            sender.sendto(_with_checksum(message, ipv6), (target, 0))
        seen: list[bytes] = []
        deadline = time.monotonic() + 5
        while len(seen) < len(messages) and time.monotonic() < deadline:
            seen += _drain(witness)
            time.sleep(0.01)
        assert len(seen) == len(messages)  # every datagram was delivered to raw sockets
        got = _drain(filtered)
    start = 0 if ipv6 else 20  # an IPv4 raw socket reads the IP header too
    identifiers = [struct.unpack("!H", data[start + 4 : start + 6])[0] for data in got]
    types = [data[start] for data in got]
    assert len(got) == 2, got
    assert types == [reply, 1 if ipv6 else 3]
    assert identifiers[0] == OURS
