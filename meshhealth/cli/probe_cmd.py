"""`meshhealth probe`: one-shot, fping-like probes of the given addresses, concurrently."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from meshhealth import defaults, model

if TYPE_CHECKING:
    from meshhealth.cli.probe_session import ProbeSession

PROG = "meshhealth probe"
NO_RAW_SOCKET = f"{PROG}: ICMP needs root or CAP_NET_RAW; use --http to probe without it"

DESCRIPTION = f"""\
Probe each TARGET (IP address or host name) over ICMP (echo, {defaults.ICMP_COUNT} \
requests {defaults.ICMP_INTERVAL_S * 1000:.0f} ms apart)
and HTTP (GET {defaults.HTTP_PATH}, 200 = OK), all at once, each under its own deadline,
and print one line per target and protocol. A host name is resolved once, at start, to
its first IPv4 and first IPv6 address (both are probed). Exit status: 0 when every
probe is OK, 1 when any is not, 2 on usage errors.

examples:
  meshhealth probe 10.0.0.2 10.0.0.9
      10.0.0.2  icmp  OK  rtt=412.5µs loss=0%
      10.0.0.2  http  OK  rtt=1.02ms
      10.0.0.9  icmp  Connection timed out
      10.0.0.9  http  Connection timed out
  meshhealth probe --http --port 8080 127.0.0.1 ::1 localhost
  meshhealth probe --icmp --count 1 -f hosts.txt -o json
  printf '10.0.0.2\\n10.0.0.3\\n' | meshhealth probe -f -

fping habits (-c, -C, -p, -t in fping's units: -p and -t in milliseconds):
  meshhealth probe --icmp -q -c 5 10.0.0.2 10.0.0.9          (like fping -q -c 5)
      10.0.0.2  icmp : xmt/rcv/%loss = 5/5/0%, min/avg/max = 0.041/0.052/0.078
      10.0.0.9  icmp : xmt/rcv/%loss = 5/0/100%
  meshhealth probe --icmp -q -C 3 10.0.0.2                    (like fping -q -C 3)
      10.0.0.2  icmp : 0.041 - 0.047
  meshhealth probe --icmp -c 3 -p 100 -t 500 10.0.0.2   (3 requests 100 ms apart)
  meshhealth probe --icmp --loop 10.0.0.2        (like fping -l; Ctrl-C: final summary)
      [1 2026-11-27T05:40:01Z] 10.0.0.2  icmp  OK  rtt=412.5µs loss=0%
  meshhealth probe --icmp -c 100 -p 0 -f hosts.txt -q   (a burst)

traceroute:
  meshhealth probe --trace 10.77.16.3            (which hop answers on the way)
       1  10.77.0.254  0.081 ms  0.044 ms  0.040 ms
       2  10.77.16.3  0.120 ms  0.091 ms  0.088 ms
  --trace sends --count ICMP echo requests per hop (default 3) with TTL 1, 2, ... up to
  --max-hops (default 30), and waits --timeout for each hop's answers. Exit status: 0
  when the target answered, 1 when not (the last line says after which hop it stops).
  With -o json: one object (docs/probe.md).

With -c/--count N, -C N, --loop or -q, a summary line per target and protocol follows
on stderr, as fping's (-q: only the summaries): requests sent / replies / loss, and
min/avg/max RTT in milliseconds as fping prints them; -C N lists every request's RTT
instead (`-` for no reply). --loop runs a round every --period seconds (one request per
target unless --count says more), starts each line with the round and its start time
(UTC), prints a summary every --summary-every seconds and a final one when interrupted
(Ctrl-C, SIGINT). -p MS is fping's period: the time between two requests to one target
(--interval, and --period with --loop). fping's -i (a pause between any two packets)
has no equivalent: a round sends to every target at once.

JSON (-o json) is a list of objects, one per line of text output, with the fields
ip, protocol ("icmp"|"http"), status (ok, timeout, refused, reset, unreachable,
http_error, invalid, error), text (as in the text output), detail, rtt_s (mean, null
without reply), rtts_s, sent, received, loss (0..1), started_at (ISO 8601, UTC),
started_at_unix (the same in unix seconds). With
--loop, one such list per round.
ICMP needs root or CAP_NET_RAW.
"""


def parse_target_lines(text: str) -> list[str]:
    """Targets from a file: whitespace separated, `#` starts a comment. Pure."""
    words: list[str] = []
    for line in text.splitlines():
        words.extend(line.split("#", 1)[0].split())
    return words


def chosen_protocols(icmp: bool, http: bool) -> frozenset[model.Protocol]:
    """Both unless exactly the flags given say otherwise. Pure."""
    chosen = set()
    if icmp:
        chosen.add(model.Protocol.ICMP)
    if http:
        chosen.add(model.Protocol.HTTP)
    return frozenset(chosen) if chosen else frozenset(model.REACHABILITY_PROTOCOLS)


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


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be > 0: {text!r}")
    return value


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be >= 0: {text!r}")
    return value


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


def _no_fping_interval(text: str) -> float:
    raise argparse.ArgumentTypeError(
        "fping's pause between any two packets is not supported: a round sends to every "
        "target at once; -p MS sets the time between two requests to one target"
    )


def build_session(args: argparse.Namespace) -> ProbeSession:
    """The session the parsed options ask for: fping's short forms (-c, -C, -p, -t)
    folded into the long ones. Pure. Raises ValueError for a combination that makes no
    sense."""
    from meshhealth.cli.probe_session import ProbeSession

    count: int | None = args.count
    if args.vcount is not None:
        if args.loop:
            raise ValueError("-C lists every request: not with --loop (use -c)")
        if count is not None and count != args.vcount:
            raise ValueError(f"-C {args.vcount} and --count {count} disagree")
        count = args.vcount
    interval_s, period_s = args.interval, args.period
    if args.period_ms is not None:
        interval_s = period_s = args.period_ms / 1000.0
    timeout_s = args.timeout if args.timeout_ms is None else args.timeout_ms / 1000.0
    return ProbeSession(
        protocols=chosen_protocols(args.icmp, args.http),
        port=args.port,
        timeout_s=timeout_s,
        count=count if count is not None else (1 if args.loop else defaults.ICMP_COUNT),
        interval_s=interval_s,
        loop=args.loop,
        period_s=period_s,
        summary_every_s=args.summary_every,
        summaries=count is not None or args.loop or args.quiet,
        per_request=args.vcount is not None,
        quiet=args.quiet,
        json=args.output == "json",
    )


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "probe",
        help="one-shot ICMP/HTTP probes of the given addresses (fping-like)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "targets", nargs="*", metavar="TARGET", help="IPv4 or IPv6 address, or host name"
    )
    parser.add_argument(
        "--trace",
        metavar="TARGET",
        help="traceroute to TARGET over ICMP echo: which hop answers on the way",
    )
    parser.add_argument(
        "--max-hops",
        type=_positive_int,
        default=defaults.TRACE_MAX_HOPS,
        metavar="N",
        help="with --trace: the highest TTL tried (default %(default)s, at most 64)",
    )
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
        "-c",
        "--count",
        type=_positive_int,
        default=None,
        help=f"ICMP echo requests per target and round, and print summaries (default "
        f"{defaults.ICMP_COUNT}; with --loop 1)",
    )
    parser.add_argument(
        "--interval",
        type=_non_negative_float,
        default=defaults.ICMP_INTERVAL_S,
        metavar="SECONDS",
        help="between a target's ICMP requests; 0: a burst (default %(default)s)",
    )
    parser.add_argument(
        "-C",
        "--vcount",
        type=_positive_int,
        default=None,
        metavar="COUNT",
        help="like --count, and the summaries list every request's RTT in ms "
        "('-': no reply), as fping -C; not with --loop",
    )
    parser.add_argument(
        "-p",
        type=_non_negative_float,
        default=None,
        metavar="MS",
        dest="period_ms",
        help="fping's period, in milliseconds: the time between two requests to one "
        "target (sets --interval, and --period with --loop)",
    )
    parser.add_argument(
        "-t",
        type=_positive_float,
        default=None,
        metavar="MS",
        dest="timeout_ms",
        help="fping's timeout, in milliseconds (sets --timeout)",
    )
    parser.add_argument(
        "-i",
        type=_no_fping_interval,
        metavar="MS",
        dest="fping_interval",
        help="fping's pause between any two packets: not supported (a round sends to "
        "every target at once); -p MS sets one target's period",
    )
    parser.add_argument(
        "-l",
        "--loop",
        action="store_true",
        help="probe in rounds until interrupted (Ctrl-C), with periodic summaries",
    )
    parser.add_argument(
        "--period",
        type=_non_negative_float,
        default=defaults.PROBE_LOOP_PERIOD_S,
        metavar="SECONDS",
        help="with --loop: from one round's start to the next (default %(default)s)",
    )
    parser.add_argument(
        "--summary-every",
        type=_positive_float,
        default=defaults.PROBE_LOOP_SUMMARY_S,
        metavar="SECONDS",
        help="with --loop: print the summary this often (default %(default)s)",
    )
    parser.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="print only the summaries, not a line per probe",
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


def _read_words(args: argparse.Namespace) -> list[str]:
    """Targets as written, from the arguments and --file. Raises ValueError for users."""
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
    if not words:
        raise ValueError("no targets given (TARGET... or -f FILE)")
    from meshhealth.probe.resolve import parse_target

    for word in words:  # syntax now, before anything is resolved or probed
        parse_target(word)
    return words


# Options --trace does not take (each a different kind of run).
_NOT_WITH_TRACE = (
    ("targets", "TARGET arguments"),
    ("file", "-f"),
    ("http", "--http"),
    ("loop", "--loop"),
    ("quiet", "-q"),
    ("vcount", "-C"),
)


def run(args: argparse.Namespace) -> int:
    if args.trace is not None:
        for name, flag in _NOT_WITH_TRACE:
            if getattr(args, name):
                print(f"{PROG}: --trace takes one TARGET, not {flag}", file=sys.stderr)
                return 2
        from meshhealth.cli.probe_trace import run_trace

        return run_trace(
            args.trace,
            max_hops=args.max_hops,
            count=args.count if args.count is not None else defaults.ICMP_COUNT,
            timeout_s=args.timeout if args.timeout_ms is None else args.timeout_ms / 1000.0,
            as_json=args.output == "json",
        )
    import trio

    from meshhealth.probe.icmp_socket import PingerPermissionError

    try:
        session = build_session(args)
    except ValueError as exc:
        print(f"{PROG}: {exc} (see {PROG} --help)", file=sys.stderr)
        return 2
    try:
        words = _read_words(args)
    except ValueError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    from meshhealth.gc_tuning import tune_gc_for_probing

    tune_gc_for_probing()  # thousands of targets from -f: see docs/performance.md
    try:
        return trio.run(session.run, words)
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
