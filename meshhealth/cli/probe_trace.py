"""`meshhealth probe --trace TARGET`: resolve, trace, print (text or JSON)."""

from __future__ import annotations

import functools
import json
import sys

PROG = "meshhealth probe"


def run_trace(word: str, *, max_hops: int, count: int, timeout_s: float, as_json: bool) -> int:
    """Exit status: 0 when the target answered, 1 when not, 2 on usage errors."""
    import trio

    from meshhealth.cli.format_trace import format_trace_text, trace_document
    from meshhealth.probe.icmp_socket import PingerPermissionError
    from meshhealth.probe.resolve import first_address
    from meshhealth.probe.trace import check_bounds, trace
    from meshhealth.terminal_text import escape

    try:
        check_bounds(max_hops, count)
        ip = first_address(word)
    except ValueError as exc:
        print(f"{PROG}: {escape(str(exc))}", file=sys.stderr)
        return 2

    try:
        result = trio.run(
            functools.partial(trace, ip, max_hops=max_hops, count=count, timeout_s=timeout_s)
        )
    except PingerPermissionError:
        print(f"{PROG}: --trace needs root or CAP_NET_RAW (raw ICMP socket)", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"{PROG}: trace to {ip}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    if as_json:
        print(json.dumps(trace_document(result), indent=2))
    else:
        print(format_trace_text(result))
    return 0 if result.reached else 1
