"""A small certificate authority for labs and tests, made with the openssl command.

    ca = make_ca(Path("pki"))
    server = make_cert(ca, Path("pki"), "etcd-1", ips=["10.77.255.1"])
    client = make_cert(ca, Path("pki"), "meshhealth")
    expired = make_cert(ca, Path("pki"), "old", days=-1)   # notAfter in the past

Why openssl (Debian's `openssl` package) rather than the `cryptography` Python
package: the lab already needs Debian tools (iproute2, nftables, etcd-server) and
openssl is on every machine that has them, whereas `cryptography` would be a new
compiled runtime dependency used only to make lab certificates. Keys are EC P-256
(fast to make; etcd, gRPC and OpenSSL all accept them). Every certificate is valid for
server and client use, with the IPs and names given as subjectAltNames.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from meshhealth import defaults

_KEY_ARGS = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")


class CertError(RuntimeError):
    """openssl is missing or failed (the message has its last error line)."""


@dataclass(frozen=True, slots=True)
class KeyPair:
    """A certificate and its private key (PEM files)."""

    cert: Path
    key: Path


def _openssl(*args: str, cwd: Path) -> None:
    binary = shutil.which("openssl")
    if binary is None:
        raise CertError("openssl not found: apt-get install openssl")
    result = subprocess.run(
        [binary, *args], cwd=cwd, capture_output=True, text=True, timeout=30, check=False
    )
    if result.returncode != 0:
        lines = (result.stderr or result.stdout).strip().splitlines()
        raise CertError(f"openssl {args[0]} failed: {lines[-1] if lines else 'no output'}")


def make_ca(
    directory: Path, name: str = "meshhealth-lab-ca", *, days: int = defaults.LAB_CA_DAYS
) -> KeyPair:
    """A self-signed CA in `directory` (`NAME.crt`, `NAME.key`)."""
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / f"{name}.cnf"
    config.write_text(
        "[req]\ndistinguished_name = dn\nprompt = no\n"
        f"[dn]\nCN = {name}\n"
        "[ext]\nbasicConstraints = critical,CA:TRUE\n"
        "keyUsage = critical,keyCertSign,cRLSign\nsubjectKeyIdentifier = hash\n"
    )
    pair = KeyPair(directory / f"{name}.crt", directory / f"{name}.key")
    _openssl(
        "req", "-x509", "-config", config.name, "-extensions", "ext", *_KEY_ARGS,
        "-keyout", pair.key.name, "-out", pair.cert.name, "-days", str(days),
        cwd=directory,
    )  # fmt: skip
    os.chmod(pair.key, 0o600)
    return pair


def make_cert(
    ca: KeyPair,
    directory: Path,
    name: str,
    *,
    ips: Sequence[str] = ("127.0.0.1",),
    dns: Sequence[str] = ("localhost",),
    days: int = defaults.LAB_CERT_DAYS,
) -> KeyPair:
    """A certificate for `name` signed by `ca`, for servers and clients. `days` <= 0
    makes one that has already expired (for tests)."""
    directory.mkdir(parents=True, exist_ok=True)
    alt = [f"IP:{ip}" for ip in ips] + [f"DNS:{d}" for d in dns]
    ext = directory / f"{name}.ext"
    ext.write_text(
        "basicConstraints = CA:FALSE\n"
        "keyUsage = critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage = serverAuth,clientAuth\n"
        + (f"subjectAltName = {','.join(alt)}\n" if alt else "")
    )
    pair = KeyPair(directory / f"{name}.crt", directory / f"{name}.key")
    csr = directory / f"{name}.csr"
    _openssl(
        "req", "-new", *_KEY_ARGS, "-keyout", pair.key.name, "-out", csr.name,
        "-subj", f"/CN={name}",
        cwd=directory,
    )  # fmt: skip
    serial = str(int.from_bytes(os.urandom(8), "big"))
    _openssl(
        "x509", "-req", "-in", csr.name, "-CA", str(ca.cert), "-CAkey", str(ca.key),
        "-set_serial", serial, "-days", str(days if days > 0 else -1), "-extfile", ext.name,
        "-out", pair.cert.name,
        cwd=directory,
    )  # fmt: skip
    csr.unlink()
    os.chmod(pair.key, 0o600)
    return pair


def make_pki(directory: Path, servers: Sequence[tuple[str, str]], clients: Sequence[str]) -> bool:
    """A CA, one certificate per server `(name, ip)` (with the name and the IP as
    subjectAltNames) and one per client name, in `directory`; nothing when the CA is
    there already (returns False), so a restarted container keeps the certificates
    its peers trust."""
    if (directory / "meshhealth-lab-ca.crt").exists():
        return False
    staging = directory / ".making"
    shutil.rmtree(staging, ignore_errors=True)
    ca = make_ca(staging)
    for name, ip in servers:
        make_cert(ca, staging, name, ips=(ip, "127.0.0.1"), dns=(name, "localhost"))
    for name in clients:
        make_cert(ca, staging, name, ips=(), dns=())
    for cnf in staging.glob("*.cnf"):
        cnf.unlink()
    for ext in staging.glob("*.ext"):
        ext.unlink()
    marker = staging / "meshhealth-lab-ca.crt"
    for path in sorted(staging.iterdir()):
        if path != marker:
            path.rename(directory / path.name)
    marker.rename(directory / marker.name)  # last: the CA marks a complete set
    staging.rmdir()
    return True


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m meshhealth.lab.certs DIR --server NAME=IP ... --client NAME ...`: the
    compose lab's certificates (compose/certs-entrypoint.sh)."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m meshhealth.lab.certs")
    parser.add_argument("directory", type=Path)
    parser.add_argument("--server", action="append", default=[], metavar="NAME=IP")
    parser.add_argument("--client", action="append", default=[], metavar="NAME")
    args = parser.parse_args(argv)
    servers: list[tuple[str, str]] = []
    for item in args.server:
        name, sep, ip = item.partition("=")
        if not sep or not name or not ip:
            parser.error(f"--server {item!r}: expected NAME=IP")
        servers.append((name, ip))
    try:
        made = make_pki(args.directory, servers, args.client)
    except (CertError, OSError) as exc:
        print(f"certs: {args.directory}: {exc}", file=sys.stderr)
        return 1
    print(f"certs: {'made' if made else 'kept'} the CA and certificates in {args.directory}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
