"""A local single-member etcd (the Debian `etcd` binary) on free loopback ports.

    with LocalEtcd() as server:           # temporary data dir, removed on exit
        print(server.endpoint)            # http://127.0.0.1:<port>
        server.kill()                     # SIGKILL; server.restart() brings it back
                                          # on the same ports with the same data

    server.data_root.line()               # where its data went and why (RAM or disk)

    with LocalEtcd(tls=True) as server:   # https, client certificates required
        server.endpoint                   # https://127.0.0.1:<port>
        server.tls_files()                # CA, client cert and key (its own small CA)

A test fixture: used by the `etcd_server` fixture (tests/plugins/etcd_server.py) and by
tests that need an etcd of their own or a free loopback port. (The lab runs its etcds
itself: meshhealth/lab/etcd_proc.py.) It only ever signals the process it started, by
PID. Synchronous (subprocess + polling).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from types import TracebackType

from meshhealth.kvstore.etcd_config import TlsFiles
from meshhealth.lab.certs import KeyPair, make_ca, make_cert
from meshhealth.lab.ram_disk import DataRoot, etcd_data_root

# How long a fresh etcd may take to answer /health, and to exit after SIGTERM.
START_TIMEOUT_S = 20.0
# Raft timers for a single member on loopback: etcd's defaults (100 ms / 1 s) make a
# start take ~0.4 s (it waits an election timeout to elect itself); these ~0.1 s.
HEARTBEAT_MS = 10
ELECTION_TIMEOUT_MS = 100
STOP_TIMEOUT_S = 5.0
_POLL_S = 0.02
# Talk to the local etcd directly, whatever http_proxy says.
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class EtcdNotFound(RuntimeError):
    """The etcd binary is not installed."""


class EtcdStartError(RuntimeError):
    """etcd did not come up (the message ends with the tail of its log)."""


def free_loopback_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on `host` right now (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def tests_data_root() -> DataRoot:
    """Where the tests' etcds keep their data: /dev/shm with room, else the temp dir."""
    return etcd_data_root(disk=Path(tempfile.gettempdir()))


class LocalEtcd:
    """One etcd process listening on loopback, owned by this object.

    `data_dir`: reuse this directory (kept on close) instead of a temporary one.
    `binary`: path or name of the etcd executable.
    `tls`: serve https with a certificate of a CA made for this server (`ca`); with
    `client_cert_auth` etcd also asks clients for a certificate of that CA (`client`
    is one). `extra_args`: more etcd flags (e.g. `--auth-token-ttl 1`).
    """

    def __init__(
        self,
        *,
        data_dir: str | os.PathLike[str] | None = None,
        binary: str = "etcd",
        host: str = "127.0.0.1",
        client_port: int | None = None,
        peer_port: int | None = None,
        name: str = "meshhealth",
        tls: bool = False,
        client_cert_auth: bool = True,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        found = shutil.which(binary)
        if found is None:
            raise EtcdNotFound(f"{binary} not found: apt-get install etcd-server")
        self.binary = found
        self.host = host
        self.name = name
        self._own_dir: tempfile.TemporaryDirectory[str] | None = None
        # In RAM where /dev/shm has room (etcd fsyncs every write, and on a loaded disk
        # that took 100 ms and more a write); on disk in a container's small /dev/shm.
        # None: the caller chose the directory (`data_dir`).
        self.data_root: DataRoot | None = None
        if data_dir is None:
            self.data_root = tests_data_root()
            self._own_dir = tempfile.TemporaryDirectory(
                prefix="meshhealth-etcd-", dir=self.data_root.path
            )
            base = Path(self._own_dir.name)
            self.data_dir = base / "data"
            self.log_path = base / "etcd.log"
        else:
            self.data_dir = Path(data_dir)
            self.log_path = self.data_dir.with_name(self.data_dir.name + ".log")
        self.client_port = client_port or free_loopback_port(host)
        self.peer_port = peer_port or free_loopback_port(host)
        self.extra_args = extra_args
        self._process: subprocess.Popen[bytes] | None = None
        self.tls = tls
        self.client_cert_auth = tls and client_cert_auth
        self.pki_dir = self.data_dir.parent / f"{name}-pki"
        self.ca: KeyPair | None = None
        self.server_cert: KeyPair | None = None
        self.client: KeyPair | None = None
        if tls:
            self.ca = make_ca(self.pki_dir, "test-ca")
            self.server_cert = make_cert(self.ca, self.pki_dir, "server", ips=[host])
            self.client = make_cert(self.ca, self.pki_dir, "client")

    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"

    @property
    def endpoint(self) -> str:
        return f"{self.scheme}://{self.host}:{self.client_port}"

    def tls_files(self) -> TlsFiles:
        """The CA and the client certificate and key that this server accepts."""
        assert self.ca is not None and self.client is not None, "not a TLS server"
        return TlsFiles(str(self.ca.cert), str(self.client.cert), str(self.client.key))

    def tls_args(self) -> list[str]:
        if not self.tls:
            return []
        assert self.ca is not None and self.server_cert is not None
        args = [
            "--cert-file",
            str(self.server_cert.cert),
            "--key-file",
            str(self.server_cert.key),
            "--trusted-ca-file",
            str(self.ca.cert),
        ]
        return [*args, "--client-cert-auth"] if self.client_cert_auth else args

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def command(self) -> list[str]:
        peer = f"http://{self.host}:{self.peer_port}"
        return [
            self.binary,
            "--name",
            self.name,
            "--data-dir",
            str(self.data_dir),
            "--listen-client-urls",
            self.endpoint,
            "--advertise-client-urls",
            self.endpoint,
            "--listen-peer-urls",
            peer,
            "--initial-advertise-peer-urls",
            peer,
            "--initial-cluster",
            f"{self.name}={peer}",
            "--initial-cluster-state",
            "new",
            "--heartbeat-interval",
            str(HEARTBEAT_MS),
            "--election-timeout",
            str(ELECTION_TIMEOUT_MS),
            "--logger",
            "zap",
            "--log-level",
            "warn",
            *self.tls_args(),
            *self.extra_args,
        ]

    # --- lifecycle -----------------------------------------------------------------------

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Start etcd and wait until it answers /health; EtcdStartError otherwise."""
        if self.running:
            return
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log_file:
            self._process = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C in the terminal is ours to handle
            )
        try:
            self.wait_ready(timeout_s)
        except BaseException:
            self.stop()
            raise

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        url = f"{self.endpoint}/health"
        opener = _NO_PROXY
        if self.tls:
            assert self.ca is not None and self.client is not None
            context = ssl.create_default_context(cafile=str(self.ca.cert))
            context.load_cert_chain(str(self.client.cert), str(self.client.key))
            opener = urllib.request.build_opener(
                urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
            )
        while True:
            if not self.running:
                raise EtcdStartError(f"etcd exited at start-up: {self._log_tail()}")
            with (
                contextlib.suppress(OSError, ValueError),
                opener.open(url, timeout=1.0) as response,
            ):
                if b'"health":"true"' in response.read():
                    return
            if time.monotonic() > deadline:
                raise EtcdStartError(
                    f"etcd at {self.endpoint} not healthy within {timeout_s:g}s: {self._log_tail()}"
                )
            time.sleep(_POLL_S)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM, then SIGKILL if it has not exited within `timeout_s` (resumes it first
        if it was stopped)."""
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGCONT)
                process.terminate()
            try:
                process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._process = None

    def kill(self) -> None:
        """SIGKILL (kill -9) and reap it."""
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            process.kill()
            process.wait()
        self._process = None

    def stop_process(self) -> None:
        """SIGSTOP: the process stays, answers nothing (its sockets stay open)."""
        if self._process is not None and self._process.poll() is None:
            os.kill(self._process.pid, signal.SIGSTOP)

    def cont(self) -> None:
        """SIGCONT after stop_process()."""
        if self._process is not None and self._process.poll() is None:
            os.kill(self._process.pid, signal.SIGCONT)

    def restart(self, timeout_s: float = START_TIMEOUT_S, *, wipe_data: bool = False) -> None:
        """Stop (if running) and start again on the same ports, with the same data, or
        with an empty data dir when `wipe_data` (a new etcd: revisions and leases gone)."""
        self.stop()
        if wipe_data:
            shutil.rmtree(self.data_dir, ignore_errors=True)
        self.start(timeout_s)

    def close(self) -> None:
        """Stop etcd and remove the temporary data directory (if we made it)."""
        try:
            self.stop()
        finally:
            if self._own_dir is not None:
                self._own_dir.cleanup()
                self._own_dir = None

    def __enter__(self) -> LocalEtcd:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _log_tail(self, lines: int = 5) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        tail = text.strip().splitlines()[-lines:]
        return " | ".join(tail) if tail else "(empty log)"


def main(argv: list[str] | None = None) -> int:
    """`python -m tests.plugins.local_etcd [COMMAND ...]`: run a throw-away etcd.

    With a COMMAND: run it with MESHHEALTH_ETCD set to the local etcd, then stop etcd
    and exit with the command's status. Without: print the endpoint and serve until
    Ctrl-C. The data lives in a temporary directory that is removed at the end.
    """
    import sys

    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == "--":
        args = args[1:]
    try:
        server = LocalEtcd()
        server.start()
    except (EtcdNotFound, EtcdStartError) as error:
        print(f"local etcd: {error}", file=sys.stderr)
        return 2
    try:
        if not args:
            print(f"etcd running at {server.endpoint} (pid {server.pid}); Ctrl-C stops it")
            with contextlib.suppress(KeyboardInterrupt):
                while server.running:
                    time.sleep(0.5)
            return 0
        env = dict(os.environ, MESHHEALTH_ETCD=server.endpoint)
        return subprocess.run(args, env=env, check=False).returncode
    finally:
        server.close()


if __name__ == "__main__":
    raise SystemExit(main())
