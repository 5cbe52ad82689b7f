"""Listing a prefix in pages against a real etcd: big values never stop a listing."""

from __future__ import annotations

import dataclasses
import logging
import time

import pytest
import trio

from meshhealth import defaults
from meshhealth.kvstore import Etcd, open_etcd
from meshhealth.matrix_source import HealthReports, InvalidValue
from meshhealth.wire import keys
from meshhealth.wire.health import encode_health_report
from tests import matrix_stories as S
from tests.cli.test_diagnose_cli import diagnose_cli, put_reports
from tests.etcd_helpers import FAST_ETCD
from tests.plugins.etcd_server import EtcdServer, running_etcd

P = "meshhealth/test/pages/"
JUNK = b"\xc1" * 1_500_000  # 1.5 MB: what etcd still accepts by default


async def test_pages_at_one_revision_in_key_order(etcd_server: EtcdServer) -> None:
    async with open_etcd(etcd_server.endpoint, **FAST_ETCD) as etcd:
        for i in range(23):
            await etcd.put(f"{P}k{i:02d}", f"v{i}".encode())
        await etcd.put("meshhealth/test/pages0", b"outside the prefix")
        before = etcd.stats.requests
        kvs, revision = await etcd.get_prefix(P, page_keys=5)
        assert [kv.key for kv in kvs] == [f"{P}k{i:02d}" for i in range(23)]
        assert [kv.value for kv in kvs] == [f"v{i}".encode() for i in range(23)]
        assert etcd.stats.requests - before == 5  # 5 + 5 + 5 + 5 + 3
        # every page is read at the first page's revision: a later write is not seen
        _, now = await etcd.get(P + "k00")
        assert revision == now
        assert (await etcd.get_prefix(P, page_keys=1000))[0] == kvs


async def test_three_junk_values_do_not_stop_the_listing(etcd_server: EtcdServer) -> None:
    async with open_etcd(etcd_server.endpoint, **FAST_ETCD) as etcd:
        await etcd.put(P + "a", b"good a")
        for name in ("j1", "j2", "j3"):
            await etcd.put(P + name, JUNK)
        await etcd.put(P + "z", b"good z")
        # 4.5 MB in one answer is more than the receive limit: the page is halved
        assert 3 * len(JUNK) > defaults.ETCD_MAX_RECEIVE_BYTES
        kvs, _ = await etcd.get_prefix(P)
        assert [kv.key for kv in kvs] == [P + k for k in ("a", "j1", "j2", "j3", "z")]
        assert {len(kv.value) for kv in kvs[1:4]} == {len(JUNK)}
        assert etcd.stats.errors == 0
        assert etcd.stats.oversized_values == 0


async def _put_junk(etcd: Etcd) -> list[str]:
    junk_keys = [keys.health_key("lab1", f"junk{i}") for i in (1, 2, 3)]
    for key in junk_keys:
        await etcd.put(key, JUNK)
    return junk_keys


def test_meshhealth_matrix_reads_the_good_entries_past_three_junk_values(
    etcd_server: EtcdServer,
) -> None:
    """The attack: three 1.5 MB values under the health prefix once made every
    whole-cluster read fail (`Received message larger than max`)."""
    put_reports(etcd_server, S.healthy)

    async def seed() -> None:
        async with open_etcd(etcd_server.endpoint, liveness=False) as etcd:
            await _put_junk(etcd)

    trio.run(seed)
    result = diagnose_cli("--etcd", etcd_server.endpoint, "--cluster", "lab1", command="matrix")
    assert result.returncode == 0, result.stderr
    assert "Reachable:   9/9 cells" in result.stdout
    assert "larger than max" not in result.stderr
    assert "skipped 3 health entries that do not decode" in result.stderr
    for i in (1, 2, 3):
        assert f"junk{i}: value is 1500000 bytes, more than {defaults.MAX_VALUE_BYTES}" in (
            result.stderr
        )


async def test_the_followed_copy_reads_past_junk_and_counts_it(etcd_server: EtcdServer) -> None:
    async with open_etcd(etcd_server.endpoint, **FAST_ETCD) as etcd:
        junk_keys = await _put_junk(etcd)
        shift = time.time() - S.NOW
        for report in S.healthy():
            fresh = dataclasses.replace(report, probe_time=report.probe_time + shift)
            await etcd.put(
                keys.health_key(report.cluster, report.node), encode_health_report(fresh)
            )
        told: list[InvalidValue] = []
        reports = HealthReports(etcd, "lab1", on_invalid=told.append)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(reports.follow)
            with trio.fail_after(10):
                await reports.listed.wait()
            assert sorted(r.node for r in reports.reports()) == ["node1", "node2", "node3"]
            assert sorted(value.key for value in told) == junk_keys
            assert reports.invalid_values == 3
            assert all("more than" in value.error for value in told)
            nursery.cancel_scope.cancel()


def test_a_value_too_large_to_receive_is_left_out_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Only an etcd whose --max-request-bytes was raised holds a value over the receive
    limit: that one key is left out of the listing, the rest is read."""
    huge = b"\xc1" * (defaults.ETCD_MAX_RECEIVE_BYTES + 1024)
    server = EtcdServer(extra_args=("--max-request-bytes", str(2 * len(huge))))

    async def check() -> None:
        async with open_etcd(server.endpoint, **FAST_ETCD) as etcd:
            await etcd.put(P + "a", b"good a")
            await etcd.put(P + "huge", huge)
            await etcd.put(P + "z", b"good z")
            kvs, _ = await etcd.get_prefix(P)
            assert [kv.key for kv in kvs] == [P + "a", P + "z"]
            assert etcd.stats.oversized_values == 1
            assert etcd.stats.errors == 0

    caplog.set_level(logging.WARNING)
    with running_etcd(server):
        trio.run(check)
    (line,) = [r.getMessage() for r in caplog.records if "skipping" in r.getMessage()]
    assert line.endswith(
        f"skipping '{P}huge': its value is larger than {defaults.ETCD_MAX_RECEIVE_BYTES} bytes"
    )
