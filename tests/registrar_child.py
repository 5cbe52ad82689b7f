"""A registrar in its own process (a separate agent), for tests that kill or race it.

    python -m tests.registrar_child ENDPOINT NODE_NAME NODE_IP TTL_S

Prints `registered` once its entries are in etcd, then runs until killed.
"""

from __future__ import annotations

import sys

import trio

from meshhealth.agent.membership.registrar import Registrar
from meshhealth.kvstore import open_etcd
from tests.etcd_helpers import FAST_ETCD, make_node


async def main(endpoint: str, name: str, node_ip: str, ttl_s: int) -> None:
    async with open_etcd(endpoint, **FAST_ETCD) as etcd:
        registrar = Registrar(etcd, make_node(name, node_ip), ttl_s=ttl_s)
        async with trio.open_nursery() as nursery:
            await nursery.start(registrar.run)
            await registrar.first_registered.wait()
            print("registered", flush=True)


if __name__ == "__main__":
    endpoint, name, node_ip, ttl = sys.argv[1:5]
    trio.run(main, endpoint, name, node_ip, int(ttl))
