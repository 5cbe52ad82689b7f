"""Which Linux capabilities the agent needs in its mode; at start it keeps only those.

`needed_capabilities` (pure) maps a `CapabilityMode` to the capabilities it needs and
why; `CapabilityMode.of` reads the mode from the configuration. `keep_only_needed`, run
once by `meshhealth agent` before trio starts (one thread: capset acts on the calling
thread), drops every other capability from the agent's bounding, permitted and
effective sets (meshhealth.privileges.limit_capabilities) and returns the one line the
agent logs. docs/security.md has the table.
"""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass
from typing import TYPE_CHECKING

from meshhealth.privileges import PrivilegeError, Privileges, limit_capabilities, read_privileges

if TYPE_CHECKING:
    from meshhealth.agent.config.agent_config import AgentConfig

PRIVILEGED_PORTS = 1024  # a listener below this needs CAP_NET_BIND_SERVICE


@dataclass(frozen=True, slots=True)
class CapabilityMode:
    """What the agent does that the kernel guards."""

    health_mode: str  # none, loopback, netns
    route_cidrs: bool
    endpoint_user: str | None  # the responder drops to this user; None: it keeps ours
    endpoint_user_is_root: bool  # that user has uid 0 (no switch, only its caps go)
    low_port: bool  # a listener on a port below 1024

    @classmethod
    def of(cls, config: AgentConfig, *, root: bool, endpoint_uid: int) -> CapabilityMode:
        """The mode of an agent with `config`, running as root or not; `endpoint_uid`:
        the uid of `config.endpoint_user`. Pure."""
        ports = [config.http_port] + [
            listen[1]
            for listen in (config.metrics_listen, config.feed_listen, config.web_listen)
            if listen is not None
        ]
        has_endpoint = config.health_mode != "none" and config.health_ip is not None
        return cls(
            health_mode=config.health_mode if has_endpoint else "none",
            route_cidrs=config.route_cidrs,
            endpoint_user=config.endpoint_user if root and has_endpoint else None,
            endpoint_user_is_root=endpoint_uid == 0,
            low_port=any(0 < port < PRIVILEGED_PORTS for port in ports),
        )


def needed_capabilities(mode: CapabilityMode) -> dict[str, str]:
    """Capability name -> why this mode needs it, in the order the log line says them.
    Pure."""
    needed = {"CAP_NET_RAW": "ICMP probes"}
    admin = []
    if mode.health_mode == "netns":
        admin.append("the health endpoint's veth, routes and forwarding sysctls")
        needed["CAP_SYS_ADMIN"] = "the health endpoint's network namespace"
    if mode.route_cidrs:
        admin.append("routes to peers' CIDRs")
    if admin:
        needed["CAP_NET_ADMIN"] = ", ".join(admin)
    if mode.health_mode != "none" and mode.endpoint_user is not None:
        if not mode.endpoint_user_is_root:
            needed["CAP_SETUID"] = f"the endpoint's responder switches to {mode.endpoint_user}"
            needed["CAP_SETGID"] = "the same, its group"
            needed["CAP_KILL"] = "stopping that responder"
        needed["CAP_SETPCAP"] = "the responder empties its bounding set"
    if mode.low_port:
        needed["CAP_NET_BIND_SERVICE"] = f"a listen port below {PRIVILEGED_PORTS}"
    order = {name: index for index, name in enumerate(_ORDER)}
    return dict(sorted(needed.items(), key=lambda item: order[item[0]]))


_ORDER = (
    "CAP_NET_RAW",
    "CAP_NET_ADMIN",
    "CAP_SYS_ADMIN",
    "CAP_SETUID",
    "CAP_SETGID",
    "CAP_SETPCAP",
    "CAP_KILL",
    "CAP_NET_BIND_SERVICE",
)


def describe(needed: dict[str, str], before: Privileges, after: Privileges) -> str:
    """The start-up line: what the mode needs and why, what was dropped, what is
    missing. Pure."""
    wants = ", ".join(f"{name} ({why})" for name, why in needed.items())
    line = f"capabilities: this mode needs {wants}"
    dropped = len(before.permitted - after.permitted)
    if dropped:
        line += f"; dropped the other {dropped}"
    missing = sorted(set(needed) - after.effective, key=_ORDER.index)
    if missing:
        line += f"; missing {', '.join(missing)} (what needs them will fail)"
    return line


def keep_only_needed(config: AgentConfig) -> str:
    """Drop every capability this agent's mode does not need; the line to log."""
    root = os.geteuid() == 0
    try:
        endpoint_uid = pwd.getpwnam(config.endpoint_user).pw_uid
    except KeyError:  # checked when the configuration was read; gone since
        endpoint_uid = -1
    needed = needed_capabilities(CapabilityMode.of(config, root=root, endpoint_uid=endpoint_uid))
    before = read_privileges()
    try:
        after = limit_capabilities(frozenset(needed))
    except PrivilegeError as error:
        return describe(needed, before, before) + f"; could not drop the others: {error}"
    return describe(needed, before, after)
