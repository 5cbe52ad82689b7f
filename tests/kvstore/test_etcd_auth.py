"""etcd authentication against a real etcd: user and password (from a file or given),
a new token when etcd refuses the old one, one-line errors for a bad password."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from meshhealth.kvstore import EtcdError, EtcdUnavailable, open_etcd
from meshhealth.kvstore.etcd_config import EtcdAuth, etcd_access
from tests.etcd_helpers import FAST_ETCD, poll_until
from tests.plugins.etcd_server import EtcdServer, running_etcd


@pytest.fixture
def auth_etcd() -> Iterator[EtcdServer]:
    """TLS with client certificates and authentication on: user `agent` may use
    meshhealth/ only."""
    with running_etcd(EtcdServer(tls=True)) as server:
        server.enable_auth("rootpw")
        server.add_user("agent", "agentpw")
        yield server


async def test_user_and_password_file(auth_etcd: EtcdServer, tmp_path: Path) -> None:
    password_file = tmp_path / "password"
    password_file.write_text("agentpw\n")
    password_file.chmod(0o600)
    auth = EtcdAuth("agent", password_file=str(password_file))
    access = etcd_access(auth_etcd.endpoint, tls=auth_etcd.tls_files(), auth=auth)
    async with open_etcd(access, **FAST_ETCD) as etcd:
        await etcd.put("meshhealth/a", b"1")
        assert etcd.stats.authentications == 1
        # outside the role's prefix: etcd answers "permission denied" (etcd is up)
        with pytest.raises(EtcdError, match="permission denied for user 'agent'") as caught:
            await etcd.put("other/a", b"1")
        assert not isinstance(caught.value, EtcdUnavailable)
        # changing the password invalidates the tokens: the next call is refused,
        # a new token is asked for with the password file as it is now
        auth_etcd.etcdctl("user", "passwd", "agent", "--interactive=false", input_bytes=b"newpw\n")
        password_file.write_text("newpw\n")
        kv, _ = await etcd.get("meshhealth/a")
        assert kv is not None and kv.value == b"1"
        assert etcd.stats.token_refreshes == 1 and etcd.stats.authentications == 2
        # a watch opens with a token too
        async with etcd.watch_prefix("meshhealth/", start_revision=1) as watch:
            batch = await watch.__anext__()
            assert [e.key for e in batch.events] == ["meshhealth/a"]
        await poll_until(lambda: etcd.health.up, 5, what="liveness with a token")


async def test_bad_password_is_one_line_and_etcd_down(auth_etcd: EtcdServer) -> None:
    access = etcd_access(
        auth_etcd.endpoint, tls=auth_etcd.tls_files(), auth=EtcdAuth("agent", password="wrong")
    )
    async with open_etcd(access, **FAST_ETCD) as etcd:
        with pytest.raises(EtcdUnavailable) as caught:
            await etcd.get("meshhealth/a")
        expected = (
            f"etcd {auth_etcd.endpoint}: authentication failed for user 'agent': "
            "invalid user or password"
        )
        assert str(caught.value) == expected
        await poll_until(lambda: etcd.health.last_error == expected, 5, what="liveness says why")
        assert not etcd.health.up


async def test_a_password_file_others_may_read_is_refused(
    auth_etcd: EtcdServer, tmp_path: Path
) -> None:
    password_file = tmp_path / "password"
    password_file.write_text("agentpw\n")
    password_file.chmod(0o640)
    auth = EtcdAuth("agent", password_file=str(password_file))
    access = etcd_access(auth_etcd.endpoint, tls=auth_etcd.tls_files(), auth=auth)
    async with open_etcd(access, liveness=False) as etcd:
        with pytest.raises(
            EtcdUnavailable,
            match=r"password file .*password: readable by group or others \(mode 0640\)",
        ):
            await etcd.get("meshhealth/a")


async def test_missing_password_file(auth_etcd: EtcdServer, tmp_path: Path) -> None:
    auth = EtcdAuth("agent", password_file=str(tmp_path / "nope"))
    access = etcd_access(auth_etcd.endpoint, tls=auth_etcd.tls_files(), auth=auth)
    async with open_etcd(access, liveness=False) as etcd:
        with pytest.raises(EtcdUnavailable, match=r"password file .*nope: No such file"):
            await etcd.get("meshhealth/a")
