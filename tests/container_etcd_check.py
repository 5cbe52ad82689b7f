"""The tests' etcd in a stock container: run there by tests/deploy/test_compose.py.

    docker run --rm -v "$PWD:/src/repo:ro" -w /src/repo -e PYTHONPATH=/src/repo \
        meshhealth:compose-test python -m tests.container_etcd_check

Starts an etcd exactly as the test suite's fixture does (LocalEtcd: its data directory
chosen by meshhealth.lab.ram_disk), writes 100 keys through meshhealth's etcd client
and reads them back. Prints the size of /dev/shm, the line saying where etcd's data went
and why, the data directory, and how many keys came back; exits non-zero on any failure
(etcd's "no space left on device" included: LocalEtcd raises with the tail of its log).
"""

from __future__ import annotations

import shutil

import trio

from meshhealth.kvstore import open_etcd
from tests.plugins.local_etcd import LocalEtcd

KEYS = 100
PREFIX = "meshhealth/test/"


async def write_and_read(endpoint: str) -> int:
    async with open_etcd(endpoint, request_timeout_s=5.0) as etcd:
        for i in range(KEYS):
            await etcd.put(f"{PREFIX}{i:03d}", b"x" * 1000)
        kvs, _ = await etcd.get_prefix(PREFIX)
        return len(kvs)


def main() -> None:
    print(f"/dev/shm: {shutil.disk_usage('/dev/shm').total // 2**20} MiB in all", flush=True)
    with LocalEtcd() as server:
        assert server.data_root is not None
        print(server.data_root.line(), flush=True)
        print(f"etcd data directory: {server.data_dir}", flush=True)
        print(f"keys written and read back: {trio.run(write_and_read, server.endpoint)}")


if __name__ == "__main__":
    main()
