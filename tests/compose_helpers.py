"""Docker engine and compose project handling for tests/deploy/test_compose.py.

Everything here acts only on what the test made: a dockerd it started (stopped by PID),
one compose project named `mhtest<pid>` (found by its compose label), and the images
`meshhealth:compose-test` and `meshhealth-base:bookworm`, which are kept between runs as
a build cache. Nothing else is removed.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.repo_paths import REPO_ROOT

COMPOSE_DIR = REPO_ROOT / "compose"
COMPOSE_FILE = COMPOSE_DIR / "docker-compose.yml"
HA_COMPOSE_FILE = COMPOSE_DIR / "docker-compose.ha.yml"  # 3 etcd members, TLS
TEST_IMAGE = "meshhealth:compose-test"  # built by the test, kept as a build cache
PULL_BASE = "debian:bookworm-slim"
LOCAL_BASE = "meshhealth-base:bookworm"  # compose/build-base-image.sh
APT_PACKAGES = {"dockerd": "docker.io", "docker-compose": "docker-compose"}
PROJECT_LABEL = "com.docker.compose.project"


class CommandFailed(AssertionError):
    pass


def run(
    argv: Sequence[str],
    *,
    timeout_s: float,
    env: dict[str, str] | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run a command; with `check`, a non-zero exit fails with the command and its output."""
    done = subprocess.run(
        list(argv), capture_output=True, text=True, timeout=timeout_s, env=env, check=False
    )
    if check and done.returncode != 0:
        raise CommandFailed(
            f"{' '.join(argv)}: exit {done.returncode}\n"
            f"stdout: {done.stdout[-3000:]}\nstderr: {done.stderr[-3000:]}"
        )
    return done


def tail(path: Path, lines: int = 5) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(no log: {exc})"


def install_missing(need_debootstrap: bool) -> None:
    """apt-get install Debian's docker.io / docker-compose / debootstrap when missing."""
    wanted = [pkg for cmd, pkg in APT_PACKAGES.items() if shutil.which(cmd) is None]
    if need_debootstrap and shutil.which("debootstrap") is None:
        wanted.append("debootstrap")
    if not wanted:
        return
    argv = ["apt-get", "install", "-y", "-q", *wanted]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    if run(argv, timeout_s=900, env=env, check=False).returncode != 0:
        run(["apt-get", "update", "-q"], timeout_s=600, env=env)
        run(argv, timeout_s=900, env=env)


def cgroups_read_only(mountinfo: str | None = None) -> bool:
    """Whether a cgroup (v1 or v2) file system is mounted read-only here, as in a
    container that is not privileged: runc cannot make a container's cgroup then."""
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
        except OSError:
            return False
    for line in mountinfo.splitlines():
        mount_options, _, rest = line.partition(" - ")
        fs_type = rest.split(" ", 1)[0]
        fields = mount_options.split()
        if fs_type in ("cgroup", "cgroup2") and len(fields) > 5 and "ro" in fields[5].split(","):
            return True
    return False


def docker_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    return run(["docker", "info"], timeout_s=30, check=False).returncode == 0


def compose_command() -> list[str]:
    """`docker-compose` (v1, Debian's package) or else the `docker compose` v2 plugin;
    MESHHEALTH_COMPOSE (e.g. "docker compose") chooses."""
    chosen = os.environ.get("MESHHEALTH_COMPOSE")
    if chosen:
        return chosen.split()
    if shutil.which("docker-compose") is not None:
        return ["docker-compose"]
    return ["docker", "compose"]


def image_exists(name: str) -> bool:
    return run(["docker", "image", "inspect", name], timeout_s=30, check=False).returncode == 0


def image_id(name: str) -> str | None:
    done = run(["docker", "image", "inspect", "-f", "{{.Id}}", name], timeout_s=30, check=False)
    return done.stdout.strip() if done.returncode == 0 else None


def base_image() -> str:
    """BASE_IMAGE from the environment, else debian:bookworm-slim when present or
    pullable, else meshhealth-base:bookworm built with debootstrap (kept for next time)."""
    if os.environ.get("BASE_IMAGE"):
        return os.environ["BASE_IMAGE"]
    if image_exists(PULL_BASE):
        return PULL_BASE
    if image_exists(LOCAL_BASE):
        return LOCAL_BASE
    if run(["docker", "pull", PULL_BASE], timeout_s=300, check=False).returncode == 0:
        return PULL_BASE
    install_missing(need_debootstrap=True)
    run(["bash", str(COMPOSE_DIR / "build-base-image.sh")], timeout_s=1200)
    return LOCAL_BASE


def build_test_image(lab: ComposeLab) -> None:
    """`build` TEST_IMAGE (`lab.env` names it and its base): from the build cache when
    nothing changed. The image an earlier run built, now untagged, is removed (no -f: an
    image still in use or tagged elsewhere stays)."""
    previous = image_id(TEST_IMAGE)
    lab("build", timeout_s=1200)
    if previous not in (None, image_id(TEST_IMAGE)):
        run(["docker", "rmi", str(previous)], timeout_s=120, check=False)


def free_lab_net() -> str:
    """First three bytes of a 10.79.X.0/24 that no docker network and no host route uses."""
    used: list[ipaddress.IPv4Network] = []
    ids = run(["docker", "network", "ls", "-q"], timeout_s=30).stdout.split()
    if ids:
        fmt = "{{range .IPAM.Config}}{{.Subnet}} {{end}}"
        out = run(["docker", "network", "inspect", "-f", fmt, *ids], timeout_s=30).stdout
        used += [ipaddress.IPv4Network(s) for s in out.split() if "." in s]
    routes = json.loads(
        run(["ip", "-j", "-4", "route", "show", "table", "all"], timeout_s=30).stdout
    )
    for route in routes:
        dst = route.get("dst", "default")
        if dst != "default":
            used.append(ipaddress.IPv4Network(dst, strict=False))
    for third in [*range(200, 256), *range(200)]:
        net = ipaddress.IPv4Network(f"10.79.{third}.0/24")
        if not any(net.overlaps(other) for other in used):
            return f"10.79.{third}"
    raise AssertionError("no free 10.79.X.0/24 for the compose lab network")


@dataclass
class ComposeLab:
    """One compose project of compose/docker-compose.yml (or `file`)."""

    compose: list[str]
    project: str
    env: dict[str, str] = field(default_factory=dict)
    file: Path = COMPOSE_FILE

    def __call__(
        self, *args: str, timeout_s: float = 300, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        argv = [*self.compose, "-p", self.project, "-f", str(self.file), *args]
        return run(argv, timeout_s=timeout_s, env={**os.environ, **self.env}, check=check)

    def status(self, node: str) -> dict[str, Any] | None:
        """`meshhealth status -o json` inside `node`; None while it does not answer."""
        done = self("exec", "-T", node, "meshhealth", "status", "-o", "json", check=False)
        if done.returncode != 0:
            return None
        try:
            doc: dict[str, Any] = json.loads(done.stdout)
        except json.JSONDecodeError:
            return None
        return doc

    def health(self, service: str) -> str:
        """The docker healthcheck state of `service`'s container ("" when none)."""
        ids = self("ps", "-q", service, check=False).stdout.split()
        if not ids:
            return ""
        fmt = "{{if .State.Health}}{{.State.Health.Status}}{{end}}"
        return run(
            ["docker", "inspect", "-f", fmt, ids[0]], timeout_s=30, check=False
        ).stdout.strip()

    def leftovers(self) -> dict[str, list[str]]:
        """Containers, networks and volumes of this project that still exist."""
        label = f"label={PROJECT_LABEL}={self.project}"
        found: dict[str, list[str]] = {}
        for kind, argv in (
            ("containers", ["docker", "ps", "-a", "-q", "--filter", label]),
            ("networks", ["docker", "network", "ls", "-q", "--filter", label]),
            ("volumes", ["docker", "volume", "ls", "-q", "--filter", label]),
            # By name as well, in case an engine ever drops the labels.
            ("networks", ["docker", "network", "ls", "-q", "--filter", f"name={self.project}_"]),
            ("volumes", ["docker", "volume", "ls", "-q", "--filter", f"name={self.project}_"]),
        ):
            ids = run(argv, timeout_s=30).stdout.split()
            found.setdefault(kind, [])
            found[kind] += [i for i in ids if i not in found[kind]]
        return {kind: ids for kind, ids in found.items() if ids}

    def force_remove(self, leftovers: dict[str, list[str]]) -> None:
        """Last resort after a failed `down`: remove this project's things by ID."""
        for kind, argv in (
            ("containers", ["docker", "rm", "-f", "-v"]),
            ("networks", ["docker", "network", "rm"]),
            ("volumes", ["docker", "volume", "rm", "-f"]),
        ):
            if leftovers.get(kind):
                run([*argv, *leftovers[kind]], timeout_s=120, check=False)


def wait_for(
    what: str, probe: Callable[[], tuple[bool, Any]], timeout_s: float, interval_s: float = 1.0
) -> Any:
    """Poll `probe()` -> (done, seen) until done; return what was seen then. Fails after
    `timeout_s` with the last thing seen."""
    deadline = time.monotonic() + timeout_s
    while True:
        done, seen = probe()
        if done:
            return seen
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout_s:g}s waiting for {what}; last: {seen!r}"
            )
        time.sleep(interval_s)
