"""Targets as users write them (IP addresses or host names) to the addresses we probe.

    targets = await resolve_targets(["10.0.0.2", "node-a", "fd00::1"])
    # [Target("10.0.0.2", "10.0.0.2"), Target("node-a", "10.0.1.5"),
    #  Target("node-a", "fd00:1::5"), Target("fd00::1", "fd00::1")]

An address stays as it is (normalised). A host name is resolved once, through the
system resolver (getaddrinfo: /etc/hosts, DNS, ...), in worker threads bounded by a
CapacityLimiter of defaults.RESOLVE_CONCURRENCY; it yields the first address of each
family it has, IPv4 then IPv6, so a dual-stack host is probed over both. An address
reached twice (written twice, or a name and its address) is probed once, under the
label it was first given. A name that does not resolve is an error for the user
(ResolveError), before anything is probed.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Sequence
from dataclasses import dataclass

import trio

from meshhealth import defaults

# RFC 1123 host names: dot-separated labels of letters, digits and inner hyphens.
_HOST_NAME = re.compile(
    r"(?=.{1,253}\.?$)(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*"
    r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.?"
)


class ResolveError(ValueError):
    """A target that is neither an IP address nor a host name that resolves."""


@dataclass(frozen=True, slots=True)
class ResolvedTarget:
    """One address to probe and what the user called it (the address itself, or a name)."""

    label: str
    ip: str


def parse_target(word: str) -> str | None:
    """The normalised IP address, or None for a valid host name. Pure.

    Raises ResolveError for anything else.
    """
    try:
        if "%" not in word:  # a scoped address (fe80::1%eth0) is not probed by address
            return str(ipaddress.ip_address(word))
    except ValueError:
        pass
    if _HOST_NAME.fullmatch(word) and not word.replace(".", "").isdigit():
        return None
    raise ResolveError(f"invalid target {word!r}: not an IP address or host name")


def first_address(word: str) -> str:
    """The address `word` names: itself if it is one, else a host name's first IPv4
    (else IPv6) address. Blocks while resolving; raises ResolveError for users."""
    literal = parse_target(word)
    return literal if literal is not None else _getaddrinfo(word)[0]


def first_per_family(addresses: Sequence[str]) -> list[str]:
    """The first IPv4 and the first IPv6 address of a resolver's answer, in that
    order. Pure."""
    v4 = next((a for a in addresses if ":" not in a), None)
    v6 = next((a for a in addresses if ":" in a), None)
    return [a for a in (v4, v6) if a is not None]


def _getaddrinfo(name: str) -> list[str]:
    try:
        infos = socket.getaddrinfo(name, None, socket.AF_UNSPEC, socket.SOCK_DGRAM)
    except (socket.gaierror, UnicodeError) as exc:
        reason = exc.strerror if isinstance(exc, socket.gaierror) else str(exc)
        raise ResolveError(f"cannot resolve {name!r}: {reason}") from None
    # A scoped IPv6 answer (fe80::1%eth0) keeps its address only: we probe by address.
    addresses = [str(ipaddress.ip_address(str(info[4][0]).partition("%")[0])) for info in infos]
    if not addresses:
        raise ResolveError(f"cannot resolve {name!r}: no address")
    return first_per_family(addresses)


async def resolve_targets(
    words: Sequence[str], *, concurrency: int = defaults.RESOLVE_CONCURRENCY
) -> list[ResolvedTarget]:
    """Every word as addresses to probe (see the module docstring), in the order given.

    Raises ResolveError for the first word (in order) that is invalid or unresolvable.
    """
    parsed = [(word, parse_target(word)) for word in words]
    names = sorted({word for word, ip in parsed if ip is None})
    found: dict[str, list[str] | ResolveError] = {}
    limiter = trio.CapacityLimiter(max(concurrency, 1))

    async def resolve(name: str) -> None:
        try:
            found[name] = await trio.to_thread.run_sync(_getaddrinfo, name, limiter=limiter)
        except ResolveError as exc:
            found[name] = exc

    async with trio.open_nursery() as nursery:
        for name in names:
            nursery.start_soon(resolve, name)
    seen: set[str] = set()
    out: list[ResolvedTarget] = []
    for word, ip in parsed:
        answer = [ip] if ip is not None else found[word]
        if isinstance(answer, ResolveError):
            raise answer
        for address in answer:
            if address not in seen:
                seen.add(address)
                out.append(ResolvedTarget(word if ip is None else address, address))
    return out
