"""TLS material for etcd: load and check the PEM files, notice when they change, and
say in one line why a handshake failed.

gRPC's own handshake errors say little ("Tls handshake failed", "Unwrap failed
(TSI_DATA_CORRUPTED)"), so:
- `load_credentials` checks the files before gRPC sees them: missing or unreadable,
  not PEM, a key that does not match the certificate, a client certificate that has
  expired or is not valid yet;
- `diagnose_handshake` repeats a failed handshake with Python's ssl module (OpenSSL)
  with the same files, which names the reason (`certificate verify failed:
  self-signed certificate in certificate chain`, `etcd refused our client
  certificate: sslv3 alert bad certificate`).

`files_fingerprint` is what the agent polls to notice replaced files (inode, mtime,
size: a Kubernetes secret update swaps a symlink, an editor writes a new inode).
"""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
from datetime import UTC, datetime

import grpc

from meshhealth.kvstore.endpoints import EtcdEndpoint
from meshhealth.kvstore.etcd_config import TlsFiles
from meshhealth.kvstore.secret_files import PemFileError, read_pem_file

Fingerprint = tuple[tuple[str, int, int, int] | tuple[str, str], ...]


class TlsSetupError(Exception):
    """The TLS files cannot be used; the message is the reason (one line)."""


def _read(path: str, what: str, *, secret: bool = False) -> bytes:
    """A PEM file's bytes; `secret` (a private key): refused unless only its owner may
    read it (secret_files.read_pem_file)."""
    try:
        return read_pem_file(path, what, secret=secret)
    except PemFileError as error:
        raise TlsSetupError(str(error)) from None


# --- a certificate's validity, read from its DER -------------------------------------------------


def _tlv(der: bytes, at: int) -> tuple[int, int, int]:
    """(tag, start of the value, end of the value) of the DER element at `at`."""
    tag = der[at]
    length = der[at + 1]
    at += 2
    if length & 0x80:
        count = length & 0x7F
        length = int.from_bytes(der[at : at + count], "big")
        at += count
    if at + length > len(der):
        raise ValueError("truncated DER")
    return tag, at, at + length


def _der_time(tag: int, text: str) -> datetime:
    if tag == 0x17:  # UTCTime YYMMDDHHMMSSZ
        year = int(text[:2])
        text = f"{1900 + year if year >= 50 else 2000 + year}{text[2:]}"
    return datetime.strptime(text, "%Y%m%d%H%M%SZ").replace(tzinfo=UTC)


def certificate_validity(pem: bytes) -> tuple[datetime, datetime]:
    """(not before, not after) of the first certificate in `pem`; ValueError if none."""
    text = pem.decode("ascii", "replace")
    begin = text.find("-----BEGIN CERTIFICATE-----")
    end = text.find("-----END CERTIFICATE-----", begin)
    if begin < 0 or end < 0:
        raise ValueError("no certificate in the file")
    der = ssl.PEM_cert_to_DER_cert(text[begin : end + len("-----END CERTIFICATE-----")])
    _, cert_start, _ = _tlv(der, 0)  # Certificate
    _, at, _ = _tlv(der, cert_start)  # tbsCertificate
    tag, _, end_at = _tlv(der, at)
    if tag == 0xA0:  # [0] version
        at = end_at
    for _ in range(3):  # serialNumber, signature, issuer; then validity
        _, _, at = _tlv(der, at)
    _, validity, _ = _tlv(der, at)
    tag1, v1, e1 = _tlv(der, validity)
    tag2, v2, e2 = _tlv(der, e1)
    return _der_time(tag1, der[v1:e1].decode()), _der_time(tag2, der[v2:e2].decode())


# --- loading ------------------------------------------------------------------------------------


def load_credentials(files: TlsFiles, *, now: datetime | None = None) -> grpc.ChannelCredentials:
    """gRPC channel credentials from `files`, after checking them; TlsSetupError says
    what is wrong (missing file, not PEM, key/certificate mismatch, expired)."""
    ca = _read(files.ca_file, "CA file") if files.ca_file else None
    cert = key = None
    if files.cert_file and files.key_file:
        cert = _read(files.cert_file, "client certificate")
        key = _read(files.key_file, "client key", secret=True)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        try:
            context.load_cert_chain(files.cert_file, files.key_file)
        except ssl.SSLError as error:
            if error.reason == "KEY_VALUES_MISMATCH":
                raise TlsSetupError(
                    f"client key {files.key_file} does not match client certificate "
                    f"{files.cert_file}"
                ) from None
            raise TlsSetupError(
                f"client certificate {files.cert_file} or key {files.key_file}: "
                f"{error.reason or error}"
            ) from None
        try:
            not_before, not_after = certificate_validity(cert)
        except (ValueError, IndexError) as error:
            raise TlsSetupError(f"client certificate {files.cert_file}: {error}") from None
        moment = now or datetime.now(UTC)
        if moment > not_after:
            raise TlsSetupError(
                f"client certificate {files.cert_file} expired at {not_after:%Y-%m-%dT%H:%M:%SZ}"
            )
        if moment < not_before:
            raise TlsSetupError(
                f"client certificate {files.cert_file} is not valid before "
                f"{not_before:%Y-%m-%dT%H:%M:%SZ}"
            )
    if ca is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        try:
            context.load_verify_locations(cadata=ca.decode("ascii", "replace"))
        except ssl.SSLError as error:
            raise TlsSetupError(f"CA file {files.ca_file}: {error.reason or error}") from None
    return grpc.ssl_channel_credentials(ca, key, cert)


def files_fingerprint(paths: tuple[str, ...]) -> Fingerprint:
    """What changes when any of `paths` is replaced or rewritten (or appears or goes)."""
    marks: list[tuple[str, int, int, int] | tuple[str, str]] = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError as error:
            marks.append((path, error.strerror or "unreadable"))
        else:
            marks.append((path, st.st_ino, st.st_mtime_ns, st.st_size))
    return tuple(marks)


# --- why a handshake failed ---------------------------------------------------------------------

_HANDSHAKE_HINTS = ("handshake", "tsi_", "ssl", "tls", "unwrap failed", "certificate")


def looks_like_tls_failure(details: str) -> bool:
    """Whether gRPC's error text points at the TLS handshake (worth a diagnosis)."""
    lowered = details.lower()
    return any(hint in lowered for hint in _HANDSHAKE_HINTS)


def diagnose_handshake(endpoint: EtcdEndpoint, files: TlsFiles, timeout_s: float) -> str | None:
    """Repeat the TLS handshake with `endpoint` using Python's ssl module; the reason it
    fails in one line, or None when it works (blocking: run it in a worker thread)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.set_alpn_protocols(["h2"])
    try:
        if files.ca_file:
            context.load_verify_locations(cafile=files.ca_file)
        else:
            context.load_default_certs()
        if files.cert_file and files.key_file:
            context.load_cert_chain(files.cert_file, files.key_file)
    except (OSError, ssl.SSLError) as error:
        return f"cannot load TLS files: {error}"
    try:
        with (
            socket.create_connection((endpoint.host, endpoint.port), timeout=timeout_s) as raw,
            context.wrap_socket(raw, server_hostname=endpoint.host) as tls,
        ):
            # With TLS 1.3 the server judges our certificate after the handshake: its
            # verdict (an alert) comes with the first read.
            tls.settimeout(min(timeout_s, 0.5))
            with contextlib.suppress(TimeoutError):
                if not tls.recv(1):
                    return "etcd closed the connection after the TLS handshake"
    except ssl.SSLCertVerificationError as error:
        detail = error.verify_message or error.reason or str(error)
        return f"certificate verify failed: {detail}"
    except ssl.SSLError as error:
        reason = (error.reason or str(error)).lower().replace("_", " ")
        if "alert" in reason:
            return f"etcd refused our client certificate: {reason}"
        if isinstance(error, ssl.SSLEOFError) or "eof" in reason:
            return "etcd closed the connection during the TLS handshake (wrong client certificate?)"
        return f"TLS handshake failed: {reason}"
    except OSError as error:
        return f"TLS handshake failed: {error.strerror or error}"
    return None
