"""IP:PORT text for listen options and messages: parse and format. Pure.

`parse_listen` is the grammar of `meshhealth responder --listen`, where the port may be
left out: a bare IPv6 address is all address (`::1` -> port default), so an IPv6 address
with a port needs brackets. The agent's `IP:PORT` options (`--metrics-listen`,
`--feed-listen`) always have a port and split at the last colon (meshhealth.agent.config.values).
"""

from __future__ import annotations

import ipaddress

from meshhealth import defaults


def parse_listen(text: str) -> tuple[str, int]:
    """`IP`, `IP:PORT`, `[IPv6]`, `[IPv6]:PORT` or a bare IPv6 -> (ip, port). Pure.

    Raises ValueError with a message fit for users.
    """
    host, port_text = text, None
    if text.startswith("["):
        close = text.find("]")
        if close < 0:
            raise ValueError(f"missing ']' in {text!r}")
        host, rest = text[1:close], text[close + 1 :]
        if rest:
            if not rest.startswith(":"):
                raise ValueError(f"expected ':PORT' after ']' in {text!r}")
            port_text = rest[1:]
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f"not an IP address: {host!r}") from None
    if text.startswith("[") and address.version != 6:
        raise ValueError(f"brackets are for IPv6 addresses: {text!r}")
    if port_text is None:
        return str(address), defaults.HTTP_PORT
    if not (port_text.isascii() and port_text.isdigit()) or int(port_text) > 65535:
        raise ValueError(f"not a port number: {port_text!r}")
    return str(address), int(port_text)


def format_address(ip: str, port: int) -> str:
    """`127.0.0.1:4240` or `[::1]:4240`. Pure."""
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"
