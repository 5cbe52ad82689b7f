"""A classic BPF program for the pinger's raw socket: only our identifier gets through.

A raw ICMP socket receives every ICMP message the host gets (other pingers, a flood
aimed at the node). This program, attached with SO_ATTACH_FILTER after the type filter
(icmp_socket.py), drops in the kernel the echo replies and destination-unreachable
errors that do not carry the pinger's identifier, before they cost a wake-up and a
Python `recv`. The matcher (icmp_match.py) still checks everything: the filter only
saves work. `program` is pure (tested by running it in a small interpreter); `attach`
is the setsockopt.
"""

from __future__ import annotations

import ctypes
import socket
import struct
from dataclasses import dataclass

from meshhealth.probe.icmp_packet import (
    ICMP_DEST_UNREACH,
    ICMP_ECHO_REPLY,
    ICMPV6_DEST_UNREACH,
    ICMPV6_ECHO_REPLY,
)

SO_ATTACH_FILTER = getattr(socket, "SO_ATTACH_FILTER", 26)
ACCEPT = 0xFFFFFFFF  # keep the whole datagram
DROP = 0
IPV6_HEADER_LEN = 40
ECHO_IDENTIFIER_OFFSET = 4  # type, code, checksum, then the identifier
ERROR_QUOTE_OFFSET = 8  # an ICMP error quotes the packet after its 8-byte header

# linux/filter.h: instruction classes, sizes, modes and operations.
BPF_LD, BPF_LDX, BPF_ALU, BPF_JMP, BPF_RET, BPF_MISC = 0x00, 0x01, 0x04, 0x05, 0x06, 0x07
BPF_W, BPF_H, BPF_B = 0x00, 0x08, 0x10
BPF_ABS, BPF_IND, BPF_MSH = 0x20, 0x40, 0xA0
BPF_ADD, BPF_AND, BPF_LSH = 0x00, 0x50, 0x60
BPF_JEQ = 0x10
BPF_K, BPF_X = 0x00, 0x08
BPF_TAX = 0x00


@dataclass(frozen=True, slots=True)
class Instruction:
    """One `struct sock_filter`: opcode, jump offsets if true / false, constant."""

    code: int
    jt: int
    jf: int
    k: int

    def packed(self) -> bytes:
        return struct.pack("=HBBI", self.code, self.jt, self.jf, self.k)


def program(identifier: int, *, ipv6: bool) -> list[Instruction]:
    """The filter for echo replies and errors carrying `identifier`. Pure."""
    if not 0 <= identifier <= 0xFFFF:
        raise ValueError(f"an ICMP identifier is 16 bits, got {identifier}")
    asm = _Assembler()
    if ipv6:
        asm.op(BPF_LD | BPF_B | BPF_ABS, 0)  # A = type
        asm.jeq(ICMPV6_ECHO_REPLY, "reply", "not-reply")
        asm.label("not-reply")
        asm.jeq(ICMPV6_DEST_UNREACH, "error", "drop")
        asm.label("error")
        quoted = ERROR_QUOTE_OFFSET + IPV6_HEADER_LEN + ECHO_IDENTIFIER_OFFSET
        asm.op(BPF_LD | BPF_H | BPF_ABS, quoted)  # A = the quoted request's identifier
        asm.jeq(identifier, "accept", "drop")
        asm.label("reply")
        asm.op(BPF_LD | BPF_H | BPF_ABS, ECHO_IDENTIFIER_OFFSET)
        asm.jeq(identifier, "accept", "drop")
    else:
        asm.op(BPF_LDX | BPF_B | BPF_MSH, 0)  # X = 4 * IHL: where the ICMP message starts
        asm.op(BPF_LD | BPF_B | BPF_IND, 0)  # A = type
        asm.jeq(ICMP_ECHO_REPLY, "reply", "not-reply")
        asm.label("not-reply")
        asm.jeq(ICMP_DEST_UNREACH, "error", "drop")
        asm.label("error")
        asm.op(BPF_LD | BPF_B | BPF_IND, ERROR_QUOTE_OFFSET)  # the quoted IP header's first byte
        asm.op(BPF_ALU | BPF_AND | BPF_K, 0x0F)
        asm.op(BPF_ALU | BPF_LSH | BPF_K, 2)  # its length
        asm.op(BPF_ALU | BPF_ADD | BPF_X, 0)  # + where our ICMP message starts
        asm.op(BPF_MISC | BPF_TAX, 0)  # X = the quoted ICMP header - 8
        asm.op(BPF_LD | BPF_H | BPF_IND, ERROR_QUOTE_OFFSET + ECHO_IDENTIFIER_OFFSET)
        asm.jeq(identifier, "accept", "drop")
        asm.label("reply")
        asm.op(BPF_LD | BPF_H | BPF_IND, ECHO_IDENTIFIER_OFFSET)
        asm.jeq(identifier, "accept", "drop")
    asm.label("accept")
    asm.op(BPF_RET | BPF_K, ACCEPT)
    asm.label("drop")
    asm.op(BPF_RET | BPF_K, DROP)
    return asm.assemble()


def attach(sock: socket.socket, instructions: list[Instruction]) -> None:
    """SO_ATTACH_FILTER: the kernel copies the program (`struct sock_fprog`)."""
    code = b"".join(instruction.packed() for instruction in instructions)
    buffer = ctypes.create_string_buffer(code, len(code))
    fprog = struct.pack("HL", len(instructions), ctypes.addressof(buffer))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)


class _Assembler:
    """Instructions with jumps to named labels, resolved to relative offsets."""

    def __init__(self) -> None:
        self._lines: list[tuple[int, str | None, str | None, int]] = []
        self._labels: dict[str, int] = {}

    def op(self, code: int, k: int) -> None:
        self._lines.append((code, None, None, k))

    def jeq(self, k: int, if_true: str, if_false: str) -> None:
        self._lines.append((BPF_JMP | BPF_JEQ | BPF_K, if_true, if_false, k))

    def label(self, name: str) -> None:
        self._labels[name] = len(self._lines)

    def assemble(self) -> list[Instruction]:
        out = []
        for index, (code, if_true, if_false, k) in enumerate(self._lines):
            jt = 0 if if_true is None else self._labels[if_true] - index - 1
            jf = 0 if if_false is None else self._labels[if_false] - index - 1
            if not (0 <= jt <= 0xFF and 0 <= jf <= 0xFF):
                raise ValueError(f"a jump of instruction {index} goes backwards or too far")
            out.append(Instruction(code, jt, jf, k))
        return out
