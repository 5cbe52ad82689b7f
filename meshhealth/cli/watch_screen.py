"""How `meshhealth watch` shows its state: the full-screen view or one line per change.

On a terminal: a full-screen view (rich Live) redrawn on every update and every second;
`q` quits, `m` toggles list/matrix. Keys are read from stdin in cbreak mode with
`trio.lowlevel.wait_readable` (no thread; stdin keeps its blocking mode, so stdout,
often the same tty, is not affected); the terminal is restored on every way out
(q, Ctrl-C, SIGTERM, SIGHUP, errors). Without a terminal or with `--plain`: one line per
change (and per connection event) until a signal.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager, nullcontext

import trio
from rich.console import Console
from rich.live import Live

from meshhealth.cli.watch_cmd import Event, Notify
from meshhealth.cli.watch_state import Change, WatchState
from meshhealth.cli.watch_view import change_line, event_line, render_frame

Source = Callable[[Notify, Event], Awaitable[None]]


@contextmanager
def cbreak(fd: int) -> Iterator[None]:
    """Keys arrive one by one and are not echoed; the old mode comes back on exit."""
    import termios
    import tty

    old = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd, termios.TCSANOW)
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, old)


async def read_keys(fd: int, on_key: Callable[[str], None]) -> None:
    while True:
        await trio.lowlevel.wait_readable(fd)
        data = os.read(fd, 64)
        if not data:
            return  # stdin closed: keys are gone, the view goes on
        for key in data.decode(errors="ignore"):
            on_key(key)


async def stop_on_signal(cancel: Callable[[], None]) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async for _ in signals:
            cancel()
            return


async def run_live(
    state: WatchState, source: Source, on_mode: Callable[[], None] = lambda: None
) -> None:
    """The full-screen view until q or a signal; `on_mode` runs after m switched views."""
    console = Console()
    dirty = trio.Event()

    def notify(changes: list[Change]) -> None:
        dirty.set()

    stdin = sys.stdin.fileno()
    keys_ok = os.isatty(stdin)
    with (
        cbreak(stdin) if keys_ok else nullcontext(),
        Live(console=console, screen=True, auto_refresh=False, redirect_stderr=False) as live,
    ):
        async with trio.open_nursery() as nursery:

            def on_key(key: str) -> None:
                if key in ("q", "Q"):
                    nursery.cancel_scope.cancel()
                elif key in ("m", "M"):
                    state.mode = "matrix" if state.mode == "list" else "list"
                    on_mode()
                    dirty.set()

            nursery.start_soon(source, notify, lambda text: None)
            nursery.start_soon(stop_on_signal, nursery.cancel_scope.cancel)
            if keys_ok:
                nursery.start_soon(read_keys, stdin, on_key)
            while True:
                frame = render_frame(state, now=time.time(), width=console.width)
                live.update(frame, refresh=True)
                with trio.move_on_after(1.0):
                    await dirty.wait()
                dirty = trio.Event()
                await trio.sleep(0.05)  # at most ~20 frames a second


def print_line(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def run_plain(state: WatchState, source: Source) -> None:
    """One line per change (and per connection event) until a signal."""

    def notify(changes: list[Change]) -> None:
        for change in changes:
            print_line(change_line(change))

    def event(text: str) -> None:
        print_line(event_line(time.time(), text))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(stop_on_signal, nursery.cancel_scope.cancel)
        await source(notify, event)
        nursery.cancel_scope.cancel()
