"""etcd adapter on trio: client (requests, leases, liveness), prefix watch with resume,
and a local etcd server for tests and the quick start (local_server, imported on its own).
"""

from meshhealth.backoff import Backoff
from meshhealth.kvstore.client import Etcd, open_etcd
from meshhealth.kvstore.errors import EtcdError, EtcdUnavailable
from meshhealth.kvstore.health import EtcdHealth, EtcdStats
from meshhealth.kvstore.messages import KV, Delete, Get, KeyAbsent, LeaseIs, Put, TxnResult
from meshhealth.kvstore.watch import (
    Compacted,
    EventKind,
    PrefixWatch,
    ResyncNeeded,
    StoreReset,
    WatchBatch,
    WatchEvent,
)

__all__ = [
    "KV",
    "Backoff",
    "Compacted",
    "Delete",
    "Etcd",
    "EtcdError",
    "EtcdHealth",
    "EtcdStats",
    "EtcdUnavailable",
    "EventKind",
    "Get",
    "KeyAbsent",
    "LeaseIs",
    "PrefixWatch",
    "Put",
    "ResyncNeeded",
    "StoreReset",
    "TxnResult",
    "WatchBatch",
    "WatchEvent",
    "open_etcd",
]
