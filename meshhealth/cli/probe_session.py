"""One run of `meshhealth probe`: resolve, probe once or in rounds, print, summarise.

The options come parsed from meshhealth.cli.probe_cmd; the text comes from the pure
formatters of meshhealth.cli.format_probe. With `loop`, rounds start every `period_s`
(at once when a round took longer) until SIGINT, which ends the round in progress,
prints the final summary and exits with the usual status (0: every probe of every round
OK, 1: any was not). Results go to stdout, summaries to stderr (as fping's do), so
stdout stays parseable; each line of a loop round starts with `[ROUND TIME] `.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

import trio

from meshhealth import model
from meshhealth.cli.format_probe import (
    SummaryBook,
    format_probe_json,
    format_probe_text,
    format_summary,
    loop_prefix,
)
from meshhealth.probe.icmp import Pinger, open_pinger
from meshhealth.probe.resolve import ResolvedTarget, ResolveError, resolve_targets
from meshhealth.probe.scheduler import run_round
from meshhealth.timefmt import iso_time

PROG = "meshhealth probe"


def target_labels(targets: Sequence[ResolvedTarget]) -> dict[str, str]:
    """What the text output calls each address: itself, or `name (address)`. Pure."""
    return {t.ip: t.ip if t.label == t.ip else f"{t.label} ({t.ip})" for t in targets}


@dataclass(frozen=True, slots=True)
class ProbeSession:
    protocols: frozenset[model.Protocol]
    port: int
    timeout_s: float
    count: int
    interval_s: float
    loop: bool
    period_s: float
    summary_every_s: float
    summaries: bool  # print summary lines (--count, --loop, -q)
    per_request: bool  # summaries list every request's RTT (-C), fping -C's form
    quiet: bool  # no line per probe
    json: bool

    async def run(self, words: Sequence[str]) -> int:
        """Resolve `words`, probe, print; the exit status (2: a name did not resolve)."""
        try:
            targets = await resolve_targets(words)
        except ResolveError as exc:
            print(f"{PROG}: {exc}", file=sys.stderr)
            return 2
        labels = target_labels(targets)
        ips = [t.ip for t in targets]
        book = SummaryBook(per_request=self.per_request)
        async with self._pinger(ips) as pinger:
            if not self.loop:
                await self._one_round(pinger, ips, labels, book, prefix="")
            else:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._stop_on_sigint, nursery.cancel_scope)
                    await self._rounds(pinger, ips, labels, book)
        if self.summaries:
            self._summary(format_summary(book, labels, per_request=self.per_request))
        return 0 if book.not_ok == 0 else 1

    async def _stop_on_sigint(self, scope: trio.CancelScope) -> None:
        with trio.open_signal_receiver(signal.SIGINT) as signals:
            async for _ in signals:
                scope.cancel()
                return

    async def _rounds(
        self, pinger: Pinger | None, ips: list[str], labels: dict[str, str], book: SummaryBook
    ) -> None:
        """Rounds until cancelled (by SIGINT)."""
        start = trio.current_time()
        next_summary = start + self.summary_every_s
        rounds = 0
        while True:
            prefix = loop_prefix(rounds + 1, time.time())
            await self._one_round(pinger, ips, labels, book, prefix=prefix)
            rounds += 1
            now = trio.current_time()
            if self.summaries and now >= next_summary:
                self._summary(f"[{iso_time(time.time())}] after {rounds} rounds\n")
                self._summary(format_summary(book, labels))
                next_summary = now + self.summary_every_s
            await trio.sleep_until(start + rounds * self.period_s)

    async def _one_round(
        self,
        pinger: Pinger | None,
        ips: list[str],
        labels: dict[str, str],
        book: SummaryBook,
        *,
        prefix: str,
    ) -> None:
        targets = [model.Target("", ip, ip) for ip in ips]
        report = await run_round(
            targets,
            pinger=pinger,
            http_port=self.port,
            timeout_s=self.timeout_s,
            icmp_count=self.count,
            icmp_interval_s=self.interval_s,
            protocols=self.protocols,
        )
        book.add(report.paths)
        if not self.quiet:
            if self.json:
                self._write(format_probe_json(report.paths))
            else:
                self._write(format_probe_text(report.paths, labels, prefix))

    @asynccontextmanager
    async def _pinger(self, ips: Sequence[str]) -> AsyncIterator[Pinger | None]:
        if model.Protocol.ICMP not in self.protocols:
            yield None
            return
        async with open_pinger() as pinger:
            # Open the raw sockets now: no permission is a usage error, not a failed path.
            for ip in {":" in ip: ip for ip in ips}.values():
                pinger.open_socket_for(ip)
            yield pinger

    def _write(self, text: str) -> None:
        """Results: stdout."""
        sys.stdout.write(text)
        sys.stdout.flush()

    def _summary(self, text: str) -> None:
        """Summaries: stderr, as fping's (stdout keeps the results alone)."""
        sys.stderr.write(text)
        sys.stderr.flush()
