"""The docker-compose lab in compose/: the generated file, and the lab end to end.

The end-to-end test (marker `compose`, root; .ci/run runs it) installs Debian's docker.io
and docker-compose when missing, starts dockerd when it is not running (and stops it, by
PID, afterwards), builds the image (on debian:bookworm-slim when it can be pulled, else on
meshhealth-base:bookworm from compose/build-base-image.sh, kept for the next run), brings
up etcd + node1..node3 as project `mhtest<pid>`, and checks what `meshhealth status` shows
on the nodes: 3/3 reachable; a paused node (ICMP answered by its kernel, HTTP frozen); a
killed node (ICMP and HTTP time out); a stopped node (it leaves cleanly). `down -v` must
leave no container, network or volume of the project. A second project runs
compose/docker-compose.ha.yml (3 etcd members, TLS with client certificates) and kills
the member the agents use: they move to another, nothing else changes. The same image,
run as a user would (`docker run`, default flags: a 64 MB /dev/shm), runs the test
suite's etcd fixture: its data goes to disk, and etcd works.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests import compose_helpers as H

NODES = ("node1", "node2", "node3")
CLUSTER = "compose"
# Generous: CI boxes are shared; the lab itself needs seconds (interval 2 s).
REACH_S = 240.0
FAULT_S = 45.0
# A killed node stays in the others' view until its lease expires: long enough to see it.
LEASE_TTL_S = 90


def gen_compose(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(H.COMPOSE_DIR / "gen-compose.sh"), *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


# --- the generated file (fast, no docker) -------------------------------------------------


def test_compose_file_is_the_generator_output_for_3_nodes() -> None:
    done = gen_compose("3")
    assert done.returncode == 0, done.stderr
    assert done.stdout == H.COMPOSE_FILE.read_text(), (
        "compose/docker-compose.yml differs from `compose/gen-compose.sh 3`: regenerate it"
    )


@pytest.mark.parametrize("nodes", [1, 5, 244])
def test_gen_compose_addresses_every_node(nodes: int) -> None:
    done = gen_compose(str(nodes))
    assert done.returncode == 0, done.stderr
    text = done.stdout
    for k in (1, nodes):
        assert f"  node{k}:\n    <<: *node\n    hostname: node{k}\n" in text
        assert f"ipv4_address: ${{MESHHEALTH_LAB_NET:-10.79.0}}.{10 + k}\n" in text
    assert f"  node{nodes + 1}:" not in text
    assert text.count("<<: *node") == nodes


def test_ha_compose_file_is_the_generator_output_for_3_members() -> None:
    done = gen_compose("--etcd-members", "3", "3")
    assert done.returncode == 0, done.stderr
    assert done.stdout == H.HA_COMPOSE_FILE.read_text(), (
        "compose/docker-compose.ha.yml differs from "
        "`compose/gen-compose.sh --etcd-members 3 3`: regenerate it"
    )


@pytest.mark.parametrize("members", [3, 5])
def test_gen_compose_members_speak_tls_to_each_other_and_to_the_agents(members: int) -> None:
    done = gen_compose("--etcd-members", str(members), "2")
    assert done.returncode == 0, done.stderr
    text = done.stdout
    urls = ",".join(f"https://etcd{m}:2379" for m in range(1, members + 1))
    assert f"    MESHHEALTH_ETCD: {urls}\n" in text
    assert "http://etcd" not in text
    for m in range(1, members + 1):
        assert f"  etcd{m}:\n" in text
        assert f'"--server", "etcd{m}=${{MESHHEALTH_LAB_NET:-10.79.0}}.{1 + m}"' in text
        assert f"ipv4_address: ${{MESHHEALTH_LAB_NET:-10.79.0}}.{1 + m}\n" in text
        assert f"  etcd{m}-data:\n" in text
    assert f"  etcd{members + 1}:" not in text
    assert text.count("condition: service_completed_successfully") == members
    assert text.count("--client-cert-auth") == 0  # the entrypoint's business, not the file's


@pytest.mark.parametrize(
    "args",
    [[], ["0"], ["245"], ["three"], ["3", "4"], ["-1"], ["--etcd-members", "2", "3"],
     ["--etcd-members", "3"], ["3", "--etcd-members", "3"]],
)  # fmt: skip
def test_gen_compose_refuses_bad_counts(args: list[str]) -> None:
    done = gen_compose(*args)
    assert done.returncode == 2
    assert done.stdout == ""
    assert "usage:" in done.stderr


HOST_MOUNTS = """\
33 25 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
34 33 0:29 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
"""
CONTAINER_V1 = """\
101 100 0:46 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - tmpfs tmpfs rw,mode=755
102 101 0:29 /docker/x /sys/fs/cgroup/cpu ro,nosuid,nodev,noexec,relatime - cgroup cgroup rw,cpu
"""
CONTAINER_V2 = "90 80 0:27 / /sys/fs/cgroup ro,nosuid,nodev,noexec - cgroup2 cgroup2 rw\n"
SYSTEMD_RO_TMPFS = """\
33 25 0:28 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
34 33 0:29 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
"""


@pytest.mark.parametrize(
    ("mountinfo", "read_only"),
    [(HOST_MOUNTS, False), (CONTAINER_V1, True), (CONTAINER_V2, True), (SYSTEMD_RO_TMPFS, False)],
    ids=["host", "container-cgroup-v1", "container-cgroup-v2", "host-systemd-ro-tmpfs"],
)
def test_cgroups_read_only_is_a_read_only_cgroup_mount(mountinfo: str, read_only: bool) -> None:
    """Only a cgroup file system mounted read-only (a container) makes the compose tests
    skip; a host's read-only tmpfs above them does not."""
    assert H.cgroups_read_only(mountinfo) is read_only


# --- the lab, end to end --------------------------------------------------------------------


@pytest.fixture(scope="module")
def docker_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A Docker engine: the running one, or a dockerd started here and stopped after."""
    if os.geteuid() != 0:
        pytest.skip("needs root: installs docker.io with apt-get and may start dockerd")
    H.install_missing(need_debootstrap=False)
    if H.docker_answers():
        yield
        return
    if H.cgroups_read_only():
        # Inside a container that is not privileged: a dockerd started here answers but
        # cannot create a container (runc: "mkdir /sys/fs/cgroup/cpuset/docker: read-only").
        pytest.skip(
            "/sys/fs/cgroup is read-only (a container): docker-in-docker needs "
            "`docker run --privileged`, or mount the host's /var/run/docker.sock"
        )
    log = tmp_path_factory.mktemp("dockerd") / "dockerd.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            ["dockerd"], stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 90
        while not H.docker_answers():
            if proc.poll() is not None:
                pytest.skip(f"dockerd cannot start here (exit {proc.returncode}): {H.tail(log)}")
            if time.monotonic() > deadline:
                pytest.skip(f"dockerd started but did not answer within 90 s: {H.tail(log)}")
            time.sleep(0.5)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


def node_view(doc: dict[str, Any], name: str) -> dict[str, str] | None:
    """How the document's node sees `name`: {"host icmp": "ok", ...}; None: not listed."""
    for node in doc["nodes"]:
        if node["cluster"] == CLUSTER and node["name"] == name:
            seen = {"state": str(node["state"])}
            for kind, key in (("host", "host"), ("endpoint", "health_endpoint")):
                addr = node.get(key)
                for proto in ("icmp", "http"):
                    status = addr["primary_address"][proto]["status"] if addr else "absent"
                    seen[f"{kind} {proto}"] = status
            return seen
    return None


def wait_view(lab: H.ComposeLab, observer: str, target: str, want: dict[str, str]) -> None:
    def probe() -> tuple[bool, Any]:
        doc = lab.status(observer)
        seen = node_view(doc, target) if doc else None
        done = seen is not None and all(seen[k] == v for k, v in want.items())
        return done, seen

    H.wait_for(f"{observer} to see {target} as {want}", probe, FAULT_S)


def wait_all_reachable(lab: H.ComposeLab, nodes: tuple[str, ...]) -> None:
    def probe() -> tuple[bool, Any]:
        seen: dict[str, Any] = {}
        for node in nodes:
            doc = lab.status(node)
            seen[node] = doc["summary"] if doc else None
            health = lab.health(node)
            if health != "healthy":
                seen[node] = (seen[node], f"docker health {health!r}")
        want = {
            "reachable": len(nodes),
            "unreachable": 0,
            "suspect": 0,
            "unknown": 0,
            "total": len(nodes),
        }
        return all(seen[n] == want for n in nodes), seen

    H.wait_for(f"{', '.join(nodes)} to report {len(nodes)}/{len(nodes)} reachable", probe, REACH_S)


@pytest.mark.compose
@pytest.mark.slow
def test_compose_lab_end_to_end(docker_engine: None) -> None:
    t0 = time.monotonic()
    lab = H.ComposeLab(compose=H.compose_command(), project=f"mhtest{os.getpid()}")
    lab.env = {
        "BASE_IMAGE": H.base_image(),
        "MESHHEALTH_IMAGE": H.TEST_IMAGE,
        "MESHHEALTH_LAB_NET": H.free_lab_net(),
        "MESHHEALTH_LAB_LEASE_TTL": str(LEASE_TTL_S),
    }
    t_base = time.monotonic()
    down: subprocess.CompletedProcess[str] | None = None
    try:
        H.build_test_image(lab)
        t_build = time.monotonic()
        lab("up", "-d", timeout_s=600)
        wait_all_reachable(lab, NODES)
        t_up = time.monotonic()

        # pause: frozen processes, live kernel: ICMP answered, HTTP times out.
        lab("pause", "node2")
        try:
            paused = {"host icmp": "ok", "endpoint icmp": "ok"}
            paused |= {"host http": "timeout", "endpoint http": "timeout"}
            wait_view(lab, "node1", "node2", paused)
        finally:
            lab("unpause", "node2")
        wait_all_reachable(lab, NODES)

        # kill (SIGKILL, like a crash; `docker kill` also keeps the restart policy
        # from starting it again): the container and its addresses are gone, the
        # lease is not, so the others keep probing it and every probe times out.
        lab("kill", "node3")
        dead = {"state": "unreachable"}
        dead |= {f"{k} {p}": "timeout" for k in ("host", "endpoint") for p in ("icmp", "http")}
        for observer in ("node1", "node2"):
            wait_view(lab, observer, "node3", dead)

        # stop (SIGTERM): the agent leaves etcd at once; node2 drops out of node1's view.
        lab("stop", "node2")
        H.wait_for(
            "node2 to leave node1's view after `stop`",
            lambda: (
                (doc := lab.status("node1")) is not None and node_view(doc, "node2") is None,
                doc,
            ),
            FAULT_S,
        )
        t_faults = time.monotonic()
        print(
            f"\ncompose lab ({' '.join(lab.compose)}): base image {t_base - t0:.0f}s, "
            f"build {t_build - t_base:.0f}s, up to 3/3 {t_up - t_build:.0f}s, "
            f"faults {t_faults - t_up:.0f}s"
        )
    finally:
        down = lab("down", "-v", "--remove-orphans", "-t", "10", timeout_s=300, check=False)
        leftovers = lab.leftovers()
        lab.force_remove(leftovers)
    assert down.returncode == 0, f"down -v failed: {down.stderr[-2000:]}"
    assert leftovers == {}, f"left behind after down -v: {leftovers}"


def etcd_views(lab: H.ComposeLab) -> dict[str, Any]:
    """Every node's `etcd` part of its status (None: the node does not answer)."""
    views: dict[str, Any] = {}
    for node in NODES:
        doc = lab.status(node)
        views[node] = doc["etcd"] if doc else None
    return views


def registered_nodes(lab: H.ComposeLab) -> list[str]:
    """The node entries in etcd, read with etcdctl inside node1 (TLS from its env)."""
    done = lab(
        "exec", "-T", "node1", "etcdctl", "get", "--prefix", "--keys-only",
        "meshhealth/state/nodes/", check=False,
    )  # fmt: skip
    return [line for line in done.stdout.split() if line] if done.returncode == 0 else []


@pytest.mark.compose
@pytest.mark.slow
def test_compose_ha_lab_loses_an_etcd_member_harmlessly(docker_engine: None) -> None:
    """compose/docker-compose.ha.yml: 3 etcd members speaking TLS with client
    certificates; killing the member the agents use changes nothing users see."""
    lab = H.ComposeLab(
        compose=H.compose_command(), project=f"mhtestha{os.getpid()}", file=H.HA_COMPOSE_FILE
    )
    lab.env = {
        "BASE_IMAGE": H.base_image(),
        "MESHHEALTH_IMAGE": H.TEST_IMAGE,
        "MESHHEALTH_LAB_NET": H.free_lab_net(),
    }
    down: subprocess.CompletedProcess[str] | None = None
    try:
        lab("build", timeout_s=1200)
        lab("up", "-d", timeout_s=600)
        wait_all_reachable(lab, NODES)
        views = etcd_views(lab)
        assert all(
            v and v["up"] and v["endpoint"].startswith("https://etcd") for v in views.values()
        ), views
        assert sorted(registered_nodes(lab)) == [
            f"meshhealth/state/nodes/v1/{CLUSTER}/{n}" for n in NODES
        ]
        # the member node1 talks to now goes away for good (SIGKILL)
        used = str(views["node1"]["endpoint"])
        member = used.removeprefix("https://").split(":")[0]
        lab("kill", member)

        def moved() -> tuple[bool, Any]:
            seen = etcd_views(lab)
            done = all(v and v["up"] and v["endpoint"] != used for v in seen.values())
            return done, seen

        H.wait_for(f"every agent to leave {member} for another member", moved, FAULT_S)
        wait_all_reachable(lab, NODES)  # nobody left any probe set, every agent answers
        assert len(registered_nodes(lab)) == len(NODES)  # no registration lost
        lab("start", member)
        H.wait_for(
            f"{member} to be healthy again",
            lambda: ((h := lab.health(member)) == "healthy", h),
            REACH_S,
        )
    finally:
        down = lab("down", "-v", "--remove-orphans", "-t", "10", timeout_s=300, check=False)
        leftovers = lab.leftovers()
        lab.force_remove(leftovers)
    assert down.returncode == 0, f"down -v failed: {down.stderr[-2000:]}"
    assert leftovers == {}, f"left behind after down -v: {leftovers}"


# --- the tests' etcd in a stock container -------------------------------------------------

STOCK_RUN_S = 120.0


@pytest.mark.compose
@pytest.mark.slow
def test_the_tests_etcd_works_in_a_stock_container(docker_engine: None) -> None:
    """`docker run` with default settings gives a 64 MB /dev/shm; etcd preallocates a
    64 MB log segment there ("no space left on device"). The test suite's etcd fixture,
    run in the compose test's image with the repository mounted read-only, must put its
    data on disk, say so in one line, and work (tests/container_etcd_check.py)."""
    lab = H.ComposeLab(compose=H.compose_command(), project=f"mhtestsb{os.getpid()}")
    lab.env = {"BASE_IMAGE": H.base_image(), "MESHHEALTH_IMAGE": H.TEST_IMAGE}
    H.build_test_image(lab)
    repo = "/src/repo"
    done = H.run(
        [
            "docker", "run", "--rm", "-v", f"{H.REPO_ROOT}:{repo}:ro", "-w", repo,
            "-e", f"PYTHONPATH={repo}", "-e", "PYTHONDONTWRITEBYTECODE=1",
            H.TEST_IMAGE, "python", "-m", "tests.container_etcd_check",
        ],
        timeout_s=STOCK_RUN_S,
    )  # fmt: skip
    lines = done.stdout.splitlines()
    print("\n" + "\n".join(lines))
    assert "/dev/shm: 64 MiB in all" in lines, lines  # docker's default: the case at hand
    chosen = [line for line in lines if line.startswith("etcd data in ")]
    assert len(chosen) == 1, lines
    assert chosen[0].startswith("etcd data in /tmp (disk): /dev/shm has "), chosen
    assert "less than the 512 MiB wanted" in chosen[0], chosen
    data_dir = next(x for x in lines if x.startswith("etcd data directory: "))
    assert data_dir.startswith("etcd data directory: /tmp/meshhealth-etcd-"), data_dir
    assert "keys written and read back: 100" in lines, lines
