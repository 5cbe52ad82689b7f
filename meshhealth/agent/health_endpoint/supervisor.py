"""The health endpoint supervisor: a passive responder on the HealthIP, kept alive.

The endpoint is what peers probe as "Endpoint connectivity" (Cilium's health endpoint,
identity 4, `reserved:health`). It is a separate process, so it can die on its own:

- loopback mode: `meshhealth responder --passive --listen HEALTHIP:PORT` as a child
  process, HealthIP a 127.x address (a whole cluster on one host, no root);
- netns mode (root): the same responder run with `ip netns exec` inside the endpoint's own
  network namespace, joined to the node's namespace by a veth pair (see
  meshhealth.agent.health_endpoint.namespace); the kernel in that namespace answers ICMP.

`HealthEndpoint.run` owns one child at a time in its own nursery. The child is restarted
when it exits, and in netns mode namespace and veth are rebuilt when they disappear
(checked every ENDPOINT_CHECK_INTERVAL_S). Every restart is counted (by reason) for
`meshhealth_endpoint_restarts_total`. Restarts back off (0.2 s doubling to 5 s, reset after
the child stayed up). On cancellation the child is stopped by PID (SIGTERM, SIGKILL after
a grace period) and, in netns mode, namespace and veth are removed, shielded with a
short deadline.
"""

from __future__ import annotations

import collections
import ipaddress
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import trio

from meshhealth import defaults
from meshhealth.agent.health_endpoint import namespace as endpoint_netns
from meshhealth.agent.health_endpoint.child import (
    pump_lines,
    ready_watcher,
    responder_argv,
    stderr_logger,
    stop_process,
)
from meshhealth.agent.health_endpoint.forwarding import SysctlLedger
from meshhealth.agent.health_endpoint.ip_command import PlumbingError
from meshhealth.backoff import Backoff
from meshhealth.log_format import event_fields
from meshhealth.netns import call_in_netns

if TYPE_CHECKING:
    from meshhealth.agent.config.agent_config import AgentConfig

log = logging.getLogger(__name__)
T = TypeVar("T")

MODES = ("loopback", "netns")

# Restart reasons (label values of meshhealth_endpoint_restarts_total).
REASON_EXITED = "exited"  # the responder exited after it was ready
REASON_START_FAILED = "start_failed"  # exited, or not ready in time, before it was ready
REASON_SETUP_FAILED = "setup_failed"  # namespace/veth could not be built
REASON_NETNS_MISSING = "netns_missing"  # the endpoint namespace was deleted
REASON_VETH_MISSING = "veth_missing"  # the veth pair was deleted


class RestartBackoff(Backoff):
    """Delay before the next restart: min_s, doubling to max_s, no jitter; min_s again
    after a child that stayed up for stable_s. Pure (the caller measures uptime)."""

    def __init__(
        self,
        min_s: float = defaults.ENDPOINT_RESTART_MIN_S,
        max_s: float = defaults.ENDPOINT_RESTART_MAX_S,
        stable_s: float = defaults.ENDPOINT_STABLE_S,
    ) -> None:
        super().__init__(min_s, max_s, jitter=0.0)
        self.stable_s = stable_s

    def next_delay(self, uptime_s: float) -> float:
        if uptime_s >= self.stable_s:
            self.reset()
        return self.next_delay_s()


@dataclass(slots=True)
class EndpointState:
    """What the agent's status and metrics read. Mutated only by `HealthEndpoint.run`."""

    mode: str
    health_ip: str
    port: int
    health_ip_secondary: str | None = None  # dual stack: the endpoint's other address
    netns: str | None = None  # netns mode: the endpoint's namespace
    host_iface: str | None = None  # netns mode: host side of the veth
    running: bool = False  # a responder is up and answered "listening"
    pid: int | None = None  # the current child's PID (also while starting)
    restarts: int = 0  # meshhealth_endpoint_restarts_total
    restarts_by_reason: collections.Counter[str] = field(default_factory=collections.Counter)
    last_error: str | None = None
    running_since: float | None = None  # unix seconds the current responder got ready


class HealthEndpoint:
    """Supervisor of the health endpoint. Construct, then `await nursery.start(ep.run)`.

    `node_netns` (netns mode) names the namespace the node side lives in; None (the agent)
    means the agent's own namespace. Tests pass a namespace they made. `user`: the
    responder drops to it once its sockets are open (`meshhealth responder --user`);
    None keeps the agent's user and capabilities. `node_ips` (netns mode): IPv4
    forwarding is switched on for their interfaces and the veth only; () sets it
    host-wide. Forwarding changed in the node's namespace is put back on teardown.
    """

    def __init__(
        self,
        *,
        mode: str,
        health_ip: str,
        port: int = defaults.HTTP_PORT,
        node_name: str = "",
        health_ip_secondary: str | None = None,
        netns: str | None = None,
        host_iface: str = defaults.ENDPOINT_HOST_IFACE,
        node_netns: str | None = None,
        user: str | None = None,
        node_ips: tuple[str, ...] = (),
        python: str = sys.executable,
        check_interval_s: float = defaults.ENDPOINT_CHECK_INTERVAL_S,
        ready_timeout_s: float = defaults.ENDPOINT_READY_TIMEOUT_S,
        stop_grace_s: float = defaults.ENDPOINT_STOP_GRACE_S,
        backoff: RestartBackoff | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"health endpoint mode must be one of {MODES}, got {mode!r}")
        address = ipaddress.ip_address(health_ip)
        secondary = (
            None if health_ip_secondary is None else ipaddress.ip_address(health_ip_secondary)
        )
        for ip in (address, secondary):
            if mode == "loopback" and ip is not None and not ip.is_loopback:
                raise ValueError(
                    f"loopback health endpoint needs a 127.x or ::1 HealthIP, got {ip}"
                )
        secondary_ip = None if secondary is None else str(secondary)
        self._spec: endpoint_netns.EndpointNetns | None = None
        self._sysctls = SysctlLedger()
        if mode == "netns":
            if netns is None:
                raise ValueError("netns mode needs the endpoint namespace name (netns=...)")
            if netns == node_netns:
                raise ValueError(f"the endpoint namespace cannot be the node's own: {netns}")
            self._spec = endpoint_netns.EndpointNetns(
                netns=netns,
                health_ip=str(address),
                node_netns=node_netns,
                host_iface=host_iface,
                health_ip_secondary=secondary_ip,
                node_ips=node_ips,
            )
        # --exit-with-parent: if the agent is SIGKILLed, its responder must not live on
        # holding HealthIP:port (the restarted agent's endpoint would find it in use).
        argv = responder_argv(python, str(address), port, node_name, secondary_ip)
        at = argv.index("--listen")
        run_as = [] if user is None else ["--user", user]
        self._argv = [*argv[:at], "--exit-with-parent", *run_as, *argv[at:]]
        if self._spec is not None:
            self._argv = ["ip", "netns", "exec", self._spec.netns, *self._argv]
        self._check_interval_s = check_interval_s
        self._ready_timeout_s = ready_timeout_s
        self._stop_grace_s = stop_grace_s
        self._backoff = backoff or RestartBackoff()
        self._limiter = trio.CapacityLimiter(1)
        self._built: endpoint_netns.BuiltEndpoint | None = None
        self._running_task = False
        self.state = EndpointState(
            mode=mode,
            health_ip=str(address),
            port=port,
            health_ip_secondary=secondary_ip,
            netns=netns if mode == "netns" else None,
            host_iface=host_iface if mode == "netns" else None,
        )

    @property
    def argv(self) -> list[str]:
        """The command line of the child process."""
        return list(self._argv)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Supervise until cancelled. `started()` once the first responder is ready, or
        its first attempt failed (then it keeps retrying; see `state.last_error`)."""
        if self._running_task:
            raise RuntimeError("HealthEndpoint.run is already running")
        self._running_task = True
        started = False

        def mark_started() -> None:
            nonlocal started
            if not started:
                started = True
                task_status.started()

        try:
            await self._clear_leftovers()
            while True:
                ready_at: list[float] = []

                def on_ready(ready_at: list[float] = ready_at) -> None:
                    ready_at.append(trio.current_time())
                    mark_started()

                reason, error = await self._one_life(on_ready)
                uptime_s = trio.current_time() - ready_at[0] if ready_at else 0.0
                self.state.restarts += 1
                self.state.restarts_by_reason[reason] += 1
                self.state.last_error = error
                delay_s = self._backoff.next_delay(uptime_s)
                log.warning(
                    "health endpoint: %s (%s); restarting in %.1fs",
                    reason,
                    error,
                    delay_s,
                    extra=event_fields(
                        "endpoint-restarting",
                        reason=reason,
                        error=error,
                        delay_s=round(delay_s, 3),
                        restarts=self.state.restarts,
                    ),
                )
                mark_started()
                await trio.sleep(delay_s)
        finally:
            self._running_task = False
            with trio.CancelScope(shield=True) as scope:
                scope.deadline = trio.current_time() + defaults.ENDPOINT_TEARDOWN_TIMEOUT_S
                await self._destroy()

    # --- one responder's life -----------------------------------------------------------

    async def _one_life(self, on_ready: Callable[[], None]) -> tuple[str, str]:
        """Build what is missing, run one responder until it fails; (reason, error)."""
        if self._spec is not None:
            failure = await self._ensure_built()
            if failure is not None:
                return failure
        try:
            proc = await trio.lowlevel.open_process(
                self._argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        except OSError as exc:
            return REASON_START_FAILED, f"cannot start {self._argv[0]}: {exc}"
        self.state.pid = proc.pid
        outcome: list[tuple[str, str]] = []
        ready = trio.Event()
        stderr_tail: collections.deque[str] = collections.deque(
            maxlen=defaults.ENDPOINT_STDERR_TAIL_LINES
        )
        stderr_done = trio.Event()
        try:
            async with trio.open_nursery() as nursery:

                def finish(reason: str, error: str) -> None:
                    if not outcome:
                        outcome.append((reason, error))
                    nursery.cancel_scope.cancel()

                assert proc.stdout is not None and proc.stderr is not None
                nursery.start_soon(pump_lines, proc.stdout, ready_watcher(ready), None)
                nursery.start_soon(pump_lines, proc.stderr, stderr_logger(stderr_tail), stderr_done)
                nursery.start_soon(self._watch_exit, proc, ready, stderr_tail, stderr_done, finish)
                with trio.move_on_after(self._ready_timeout_s):
                    await ready.wait()
                if not ready.is_set():
                    finish(
                        REASON_START_FAILED,
                        f"responder not ready within {self._ready_timeout_s:g}s",
                    )
                    return outcome[0]
                self.state.running = True
                self.state.running_since = time.time()
                log.info(
                    "health endpoint: responder ready (pid %d)",
                    proc.pid,
                    extra=event_fields(
                        "endpoint-ready", pid=proc.pid, restarts=self.state.restarts
                    ),
                )
                on_ready()
                await self._watch_plumbing(finish)
        finally:
            self.state.running = False
            self.state.running_since = None
            await stop_process(proc, self._stop_grace_s)
            self.state.pid = None
        return outcome[0]

    async def _watch_exit(
        self,
        proc: trio.Process,
        ready: trio.Event,
        stderr_tail: collections.deque[str],
        stderr_done: trio.Event,
        finish: Callable[[str, str], None],
    ) -> None:
        code = await proc.wait()
        with trio.move_on_after(0.5):  # let the last stderr lines arrive
            await stderr_done.wait()
        tail = " | ".join(stderr_tail)
        error = f"responder (pid {proc.pid}) exited with code {code}" + (
            f": {tail}" if tail else ""
        )
        finish(REASON_EXITED if ready.is_set() else REASON_START_FAILED, error)

    async def _watch_plumbing(self, finish: Callable[[str, str], None]) -> None:
        if self._spec is None or self._built is None:
            await trio.sleep_forever()
            return
        spec, built = self._spec, self._built
        while True:
            await trio.sleep(self._check_interval_s)
            try:
                reason = await self._thread(endpoint_netns.check_endpoint, spec, built)
            except (PlumbingError, OSError) as exc:
                log.warning("health endpoint: check failed: %s", exc)
                continue
            if reason is not None:
                self._built = None
                what = spec.netns if reason == REASON_NETNS_MISSING else spec.host_iface
                finish(reason, f"{what} disappeared")
                return

    # --- netns plumbing -----------------------------------------------------------------

    async def _ensure_built(self) -> tuple[str, str] | None:
        assert self._spec is not None
        spec = self._spec
        try:
            if self._built is not None:
                reason = await self._thread(endpoint_netns.check_endpoint, spec, self._built)
                if reason is not None:
                    self._built = None
            if self._built is None:
                # A responder may still run in a namespace that lost its name: stop it.
                await self._thread(endpoint_netns.kill_netns_processes, spec.netns)
                self._built = await self._thread(endpoint_netns.build_endpoint, spec, self._sysctls)
                log.info(
                    "health endpoint: built %s (veth %s, %s/32)",
                    spec.netns,
                    spec.host_iface,
                    spec.health_ip,
                )
        except (PlumbingError, OSError) as exc:
            self._built = None
            return REASON_SETUP_FAILED, f"building {spec.netns}: {exc}"
        return None

    async def _clear_leftovers(self) -> None:
        if self._spec is None:
            return
        try:
            pids = await self._thread(endpoint_netns.clear_leftovers, self._spec)
        except (PlumbingError, OSError) as exc:
            self.state.last_error = f"clearing leftovers of {self._spec.netns}: {exc}"
            log.warning("health endpoint: %s", self.state.last_error)
            return
        if pids:
            log.warning(
                "health endpoint: stopped %d leftover process(es) in %s: %s",
                len(pids),
                self._spec.netns,
                pids,
            )

    async def _destroy(self) -> None:
        if self._spec is None:
            return
        self._built = None
        try:
            await self._thread(endpoint_netns.destroy_endpoint, self._spec)
        except (PlumbingError, OSError) as exc:
            log.warning("health endpoint: removing %s: %s", self._spec.netns, exc)
        try:
            restored, problems = await self._thread(
                call_in_netns, self._spec.node_netns, self._sysctls.restore
            )
        except OSError as exc:
            restored, problems = [], [f"entering the node's namespace: {exc}"]
        for problem in problems:
            log.warning("health endpoint: %s", problem)
        if restored:
            log.info("health endpoint: put back %s", ", ".join(restored))

    async def _thread(self, fn: Callable[..., T], *args: Any) -> T:
        return await trio.to_thread.run_sync(fn, *args, limiter=self._limiter)


def endpoint_from_config(
    config: AgentConfig, *, netns: str | None = None, node_netns: str | None = None
) -> HealthEndpoint | None:
    """The endpoint an agent with `config` runs; None for mode `none` or no HealthIP.

    netns mode names the namespace `endpoint_netns_name(cluster, node)` unless `netns`
    is given. A root agent's responder drops to `config.endpoint_user`; another user
    cannot switch users, so its responder keeps that user.
    """
    if config.health_mode == "none" or config.health_ip is None:
        return None
    if config.health_mode == "netns" and netns is None:
        netns = endpoint_netns.endpoint_netns_name(config.cluster, config.node)
    return HealthEndpoint(
        mode=config.health_mode,
        health_ip=config.health_ip,
        port=config.http_port,
        node_name=config.node,
        health_ip_secondary=config.health_ip_secondary,
        netns=netns,
        node_netns=node_netns,
        user=config.endpoint_user if os.geteuid() == 0 else None,
        node_ips=tuple(ip for ip in (config.node_ip, config.node_ip_secondary) if ip),
    )
