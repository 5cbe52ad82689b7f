"""How many hops away a reply came from, guessed from its TTL (IPv6: hop limit). Pure.

A host sends with an initial TTL of 64 (Linux, macOS), 128 (Windows) or 255 (network
gear); each router on the way takes one off. The initial TTL is guessed as the first of
those at or above the received one, and the hop count is the hop traceroute would show
the target at: 1 on the same link, 2 behind one router (`initial - received + 1`).
It counts the reply's way back, which may differ from the way there; and it is wrong
for a way longer than the gap between two initial TTLs (64 routers).
"""

from __future__ import annotations

INITIAL_TTLS = (64, 128, 255)


def hops_from_ttl(received_ttl: int) -> int | None:
    """The hop count of a reply that arrived with `received_ttl`; None for a TTL no
    reply can have (0, above 255)."""
    if not 1 <= received_ttl <= 255:
        return None
    initial = next(ttl for ttl in INITIAL_TTLS if ttl >= received_ttl)
    return initial - received_ttl + 1
