"""TLS for the agent's browser and Prometheus ports (`--web-cert/--web-key`,
`--metrics-cert/--metrics-key`): the server's ssl.SSLContext, checked at start.

    context = server_ssl_context("/etc/mh/web.crt", "/etc/mh/web.key")  # or ServerTlsError
    listener = tls_listener(tcp_listener, context)

TLS 1.2 at least; no client certificates (the bearer token, bearer_token.py, says who
may read). The key file must be private (kvstore/secret_files.py: readable by its owner
only). A missing or unreadable file, a file that is not PEM, a key that does not match
its certificate: a one-line ServerTlsError naming the file, before the port is opened.

The handshake happens on a connection's first read, inside the server's read timeout
and after its connection cap (meshhealth.http_server.accept_connections admits the TCP
connection first): a client that connects and never says hello holds one slot for one
read timeout, as over plain HTTP.
"""

from __future__ import annotations

import ssl
from typing import Any

import trio

from meshhealth.kvstore.secret_files import PemFileError, read_pem_file


class ServerTlsError(ValueError):
    """The certificate or key cannot be used; the message names the file (one line)."""


def _check_pem(path: str, what: str, *, secret: bool) -> None:
    try:
        read_pem_file(path, what, secret=secret)
    except PemFileError as error:
        raise ServerTlsError(str(error)) from None


def server_ssl_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """A server context (TLS >= 1.2) with the certificate chain in `cert_file` and its
    key in `key_file` (private); ServerTlsError says which file is wrong and why."""
    _check_pem(cert_file, "certificate", secret=False)
    _check_pem(key_file, "key", secret=True)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert_file, key_file)
    except ssl.SSLError as error:
        if error.reason == "KEY_VALUES_MISMATCH":
            raise ServerTlsError(f"key {key_file} does not match certificate {cert_file}") from None
        raise ServerTlsError(
            f"certificate {cert_file} or key {key_file}: {error.reason or error}"
        ) from None
    return context


def tls_listener(
    listener: trio.abc.Listener[Any], context: ssl.SSLContext | None
) -> trio.abc.Listener[Any]:
    """`listener` itself without a context; with one, its connections wrapped in TLS
    (the handshake on the first read). Closing the result closes `listener`."""
    if context is None:
        return listener
    return trio.SSLListener(listener, context, https_compatible=True)
