"""TLS to a real etcd: client certificates, the errors users read, certificate
rotation without a restart (the etcd fixture's TLS mode; certificates made by
meshhealth.lab.certs in a temporary directory)."""

from __future__ import annotations

import os
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import trio

from meshhealth.kvstore import EtcdUnavailable, open_etcd
from meshhealth.kvstore.etcd_config import TlsFiles, etcd_access
from meshhealth.kvstore.tls import TlsSetupError, certificate_validity, load_credentials
from meshhealth.lab.certs import make_ca, make_cert
from tests.etcd_helpers import FAST_ETCD, poll_until
from tests.plugins.etcd_server import EtcdServer


def _replace(source: Path, target: str) -> None:
    """Replace `target` as a rotation does: write a new file, rename it over the old."""
    tmp = f"{target}.new"
    shutil.copyfile(source, tmp)
    os.chmod(tmp, 0o600)  # a private key readable by others is refused
    os.replace(tmp, target)


def test_certificate_validity_and_file_checks(tmp_path: Path) -> None:
    ca = make_ca(tmp_path)
    good = make_cert(ca, tmp_path, "good", days=2)
    old = make_cert(ca, tmp_path, "old", days=0)
    not_before, not_after = certificate_validity(good.cert.read_bytes())
    now = datetime.now(UTC)
    assert not_before <= now + timedelta(minutes=1)
    assert timedelta(days=1) < not_after - now <= timedelta(days=2)
    load_credentials(TlsFiles(str(ca.cert), str(good.cert), str(good.key)))
    cases = [
        (
            TlsFiles(str(ca.cert), str(old.cert), str(old.key)),
            "client certificate .*old.crt expired at",
        ),
        (
            TlsFiles(str(ca.cert), str(good.cert), str(old.key)),
            "client key .*old.key does not match client certificate",
        ),
        (TlsFiles(str(tmp_path / "nope.crt")), "CA file .*nope.crt: No such file or directory"),
        (TlsFiles(str(good.key)), "CA file .*good.key"),
        (
            TlsFiles(str(ca.cert), str(good.cert), str(tmp_path / "x.key")),
            "client key .*x.key: No such file",
        ),
    ]
    for files, message in cases:
        with pytest.raises(TlsSetupError, match=message):
            load_credentials(files)
    # A private key other users of the host may read is no secret: refused, with the fix.
    good.key.chmod(0o644)
    with pytest.raises(
        TlsSetupError,
        match=r"client key .*good.key: readable by group or "
        r"others \(mode 0644\): chmod 600 it",
    ):
        load_credentials(TlsFiles(str(ca.cert), str(good.cert), str(good.key)))


async def test_tls_with_client_certificate(tls_etcd_server: EtcdServer) -> None:
    access = etcd_access(tls_etcd_server.endpoint, tls=tls_etcd_server.tls_files())
    assert access.endpoints[0].url.startswith("https://127.0.0.1:")
    async with open_etcd(access, **FAST_ETCD) as etcd:
        await etcd.put("meshhealth/x", b"1")
        kv, _ = await etcd.get("meshhealth/x")
        assert kv is not None and kv.value == b"1"
        await poll_until(lambda: etcd.health.up, 5, what="etcd up over TLS")
        assert etcd.endpoint_in_use == tls_etcd_server.endpoint
    # etcdctl agrees the value is there: the TLS path really wrote to this etcd
    out = tls_etcd_server.etcdctl("get", "meshhealth/x", "--print-value-only").stdout
    assert out.strip() == b"1"


async def _first_error(access_files: TlsFiles, endpoint: str) -> str:
    async with open_etcd(
        etcd_access(endpoint, tls=access_files), liveness=False, request_timeout_s=3
    ) as etcd:
        with pytest.raises(EtcdUnavailable) as caught:
            await etcd.get("meshhealth/x")
        assert not etcd.health.up
        assert etcd.health.last_error == str(caught.value)
    return str(caught.value)


async def test_tls_errors_name_endpoint_and_reason(
    tls_etcd_server: EtcdServer, tmp_path: Path
) -> None:
    server = tls_etcd_server
    good = server.tls_files()
    other_ca = make_ca(tmp_path, "other-ca")
    stranger = make_cert(other_ca, tmp_path, "stranger")
    assert server.ca is not None
    expired = make_cert(server.ca, tmp_path, "expired", days=0)
    url = server.endpoint
    cases = [
        # the CA does not know etcd's certificate
        (
            TlsFiles(str(other_ca.cert), good.cert_file, good.key_file),
            f"etcd {url}: certificate verify failed: unable to get local issuer certificate",
        ),
        # etcd does not know our certificate's CA
        (
            TlsFiles(good.ca_file, str(stranger.cert), str(stranger.key)),
            f"etcd {url}: etcd refused our client certificate:",
        ),
        # no client certificate at all
        (TlsFiles(good.ca_file), f"etcd {url}: etcd refused our client certificate:"),
        (
            TlsFiles(good.ca_file, str(expired.cert), str(expired.key)),
            f"etcd {url}: client certificate {expired.cert} expired at",
        ),
        (
            TlsFiles(good.ca_file, good.cert_file, str(expired.key)),
            f"etcd {url}: client key {expired.key} does not match",
        ),
        (
            TlsFiles(str(tmp_path / "missing.crt")),
            f"etcd {url}: CA file {tmp_path / 'missing.crt'}: No such file or directory",
        ),
    ]
    for files, expected in cases:
        message = await _first_error(files, url)
        assert message.startswith(expected), (files, message)
        assert "\n" not in message


async def test_certificate_rotation_reconnects(tls_etcd_server: EtcdServer, tmp_path: Path) -> None:
    """Start with an expired client certificate (etcd down, with the reason), replace
    the files (etcd up, no restart), rotate again to a new valid pair (reconnect, the
    watch carries on without losing an event)."""
    server = tls_etcd_server
    assert server.ca is not None
    expired = make_cert(server.ca, tmp_path, "expired", days=0)
    fresh = make_cert(server.ca, tmp_path, "fresh")
    live = tmp_path / "live"
    live.mkdir()
    cert, key = str(live / "client.crt"), str(live / "client.key")
    shutil.copyfile(expired.cert, cert)
    shutil.copyfile(expired.key, key)
    os.chmod(key, 0o600)
    assert server.client is not None
    access = etcd_access(server.endpoint, tls=TlsFiles(server.tls_files().ca_file, cert, key))
    async with open_etcd(access, files_poll_s=0.1, **FAST_ETCD) as etcd:
        await poll_until(lambda: "expired at" in etcd.health.last_error, 5, what="expired reported")
        assert not etcd.health.up
        _replace(server.client.cert, cert)
        _replace(server.client.key, key)
        await poll_until(lambda: etcd.health.up, 10, what="etcd up after the files were fixed")
        revision = await etcd.put("meshhealth/rot/a", b"1")
        seen: list[str] = []
        async with etcd.watch_prefix("meshhealth/rot/", start_revision=revision) as watch:

            async def read() -> None:
                async for batch in watch:
                    seen.extend(e.key for e in batch.events)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(read)
                await poll_until(lambda: seen == ["meshhealth/rot/a"], 5, what="first event")
                reconnects = etcd.stats.reconnects
                _replace(fresh.key, key)
                _replace(fresh.cert, cert)
                await poll_until(lambda: etcd.stats.reconnects > reconnects, 5, what="reconnect")
                await etcd.put("meshhealth/rot/b", b"2")
                await poll_until(
                    lambda: seen[-1:] == ["meshhealth/rot/b"], 10, what="event after rotation"
                )
                nursery.cancel_scope.cancel()
        assert seen == ["meshhealth/rot/a", "meshhealth/rot/b"]
        assert etcd.health.up
