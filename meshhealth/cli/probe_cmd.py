"""`meshhealth probe`: one-shot, fping-like probes of the given addresses, concurrently."""

from __future__ import annotations

import argparse
import functools
import ipaddress
import sys
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from meshhealth import defaults, model

if TYPE_CHECKING:
    from meshhealth.probe.scheduler import SupportsPing

PROG = "meshhealth probe"
NO_RAW_SOCKET = f"{PROG}: ICMP needs root or CAP_NET_RAW; use --http to probe without it"

DESCRIPTION = f"""\
Probe each TARGET once over ICMP (echo, {defaults.ICMP_COUNT} requests \
{defaults.ICMP_INTERVAL_S * 1000:.0f} ms apart) and HTTP (GET {defaults.HTTP_PATH}, \
200 = OK), all at once, each under its own deadline, and print one line per target and
protocol. Exit status: 0 when every probe is OK, 1 when any is not, 2 on usage errors.

examples:
  meshhealth probe 10.0.0.2 10.0.0.9
      10.0.0.2  icmp  OK  rtt=412.5µs loss=0%
      10.0.0.2  http  OK  rtt=1.02ms
      10.0.0.9  icmp  Connection timed out
      10.0.0.9  http  Connection timed out
  meshhealth probe --http --port 8080 127.0.0.1 ::1
  meshhealth probe --icmp --count 1 -f hosts.txt -o json
  printf '10.0.0.2\\n10.0.0.3\\n' | meshhealth probe -f -

JSON (-o json) is a list of objects, one per line of text output, with the fields
ip, protocol ("icmp"|"http"), status (ok, timeout, refused, reset, unreachable,
http_error, invalid, error), text (as in the text output), detail, rtt_s (mean, null
without reply), rtts_s, sent, received, loss (0..1), started_at (unix seconds).
ICMP needs root or CAP_NET_RAW.
"""


def parse_target_lines(text: str) -> list[str]:
    """Targets from a file: whitespace separated, `#` starts a comment. Pure."""
    words: list[str] = []
    for line in text.splitlines():
        words.extend(line.split("#", 1)[0].split())
    return words


def validate_targets(raw: Iterable[str]) -> list[str]:
    """Normalised IP addresses, duplicates dropped, order kept. Pure.

    Raises ValueError("invalid IP address 'x'") for the first word that is not one.
    """
    seen: set[str] = set()
    out: list[str] = []
    for word in raw:
        try:
            ip = str(ipaddress.ip_address(word))
        except ValueError:
            raise ValueError(f"invalid IP address {word!r}") from None
        if ip not in seen:
            seen.add(ip)
            out.append(ip)
    return out


def chosen_protocols(icmp: bool, http: bool) -> frozenset[model.Protocol]:
    """Both unless exactly the flags given say otherwise. Pure."""
    chosen = set()
    if icmp:
        chosen.add(model.Protocol.ICMP)
    if http:
        chosen.add(model.Protocol.HTTP)
    return frozenset(chosen) if chosen else frozenset(model.Protocol)


def _find(exc: BaseException, kind: type[OSError]) -> OSError | None:
    """`exc` itself or the first `kind` inside (nested) exception groups."""
    if isinstance(exc, kind):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _find(inner, kind)
            if found is not None:
                return found
    return None


def exit_code(report: model.RoundReport) -> int:
    return 0 if all(p.result.ok for p in report.paths) else 1


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be > 0: {text!r}")
    return value


def _non_negative_float(text: str) -> float:
    if text.strip() in ("0", "0.0"):
        return 0.0
    return _positive_float(text)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1: {text!r}")
    return value


def _port(text: str) -> int:
    value = _positive_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}")
    return value


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "probe",
        help="one-shot ICMP/HTTP probes of the given addresses (fping-like)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("targets", nargs="*", metavar="TARGET", help="IPv4 or IPv6 address")
    parser.add_argument("--icmp", action="store_true", help="probe over ICMP (only)")
    parser.add_argument("--http", action="store_true", help="probe over HTTP (only)")
    parser.add_argument(
        "--port", type=_port, default=defaults.HTTP_PORT, help="HTTP port (default %(default)s)"
    )
    parser.add_argument(
        "--timeout",
        type=_positive_float,
        default=defaults.PROBE_TIMEOUT_S,
        metavar="SECONDS",
        help="per probe; ICMP: after the last request (default %(default)s)",
    )
    parser.add_argument(
        "--count",
        type=_positive_int,
        default=defaults.ICMP_COUNT,
        help="ICMP echo requests per target (default %(default)s)",
    )
    parser.add_argument(
        "--interval",
        type=_non_negative_float,
        default=defaults.ICMP_INTERVAL_S,
        metavar="SECONDS",
        help="between a target's ICMP requests (default %(default)s)",
    )
    parser.add_argument(
        "-f",
        "--file",
        metavar="FILE",
        help="read more targets from FILE ('-': stdin), whitespace separated, # comments",
    )
    parser.add_argument(
        "-o", "--output", choices=("text", "json"), default="text", help="output format"
    )
    parser.set_defaults(func=run)


def _read_targets(args: argparse.Namespace) -> list[str]:
    """Targets from the arguments and --file. Raises ValueError for users."""
    words = list(args.targets)
    if args.file is not None:
        if args.file == "-":
            words += parse_target_lines(sys.stdin.read())
        else:
            try:
                with open(args.file, encoding="utf-8") as handle:
                    words += parse_target_lines(handle.read())
            except (OSError, UnicodeDecodeError) as exc:
                reason = exc.strerror if isinstance(exc, OSError) else str(exc)
                raise ValueError(f"cannot read {args.file}: {reason}") from None
    targets = validate_targets(words)
    if not targets:
        raise ValueError("no targets given (TARGET... or -f FILE)")
    return targets


def run(args: argparse.Namespace) -> int:
    import trio

    from meshhealth.cli.format_probe import format_probe_json, format_probe_text
    from meshhealth.probe.icmp import PingerPermissionError

    try:
        ips = _read_targets(args)
    except ValueError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    protocols = chosen_protocols(args.icmp, args.http)
    from meshhealth.gc_tuning import tune_gc_for_probing

    tune_gc_for_probing()  # thousands of targets from -f: see docs/performance.md
    try:
        report = trio.run(
            functools.partial(
                probe_ips,
                ips,
                protocols=protocols,
                port=args.port,
                timeout_s=args.timeout,
                count=args.count,
                interval_s=args.interval,
            )
        )
    except (OSError, ExceptionGroup) as exc:
        # Only opening the raw socket raises (probes report their own failures); trio
        # may hand it over wrapped in an ExceptionGroup.
        error = _find(exc, OSError)
        if error is None:
            raise
        if isinstance(error, PingerPermissionError):
            print(NO_RAW_SOCKET, file=sys.stderr)
        else:
            print(f"{PROG}: cannot open ICMP socket: {error.strerror or error}", file=sys.stderr)
        return 2
    if args.output == "json":
        sys.stdout.write(format_probe_json(report.paths))
    else:
        sys.stdout.write(format_probe_text(report.paths))
    sys.stdout.flush()
    return exit_code(report)


async def probe_ips(
    ips: Sequence[str],
    *,
    protocols: frozenset[model.Protocol],
    port: int,
    timeout_s: float,
    count: int,
    interval_s: float,
) -> model.RoundReport:
    """Probe every address once over `protocols`; the report lists them in order."""
    from meshhealth.probe.icmp import open_pinger

    targets = [model.Target("", ip, ip) for ip in ips]

    async def round_with(pinger: SupportsPing | None) -> model.RoundReport:
        from meshhealth.probe.scheduler import run_round

        return await run_round(
            targets,
            pinger=pinger,
            http_port=port,
            timeout_s=timeout_s,
            icmp_count=count,
            icmp_interval_s=interval_s,
            protocols=protocols,
        )

    if model.Protocol.ICMP not in protocols:
        return await round_with(None)
    async with open_pinger() as pinger:
        # Open the raw sockets now: no permission is a usage error, not a failed path.
        one_per_family = {ipaddress.ip_address(ip).version: ip for ip in ips}
        for ip in one_per_family.values():
            pinger.open_socket_for(ip)
        return await round_with(pinger)
