"""etcd adapter on trio: client (requests, leases, liveness) and prefix watch with resume.

(The tests' local etcd server is a fixture: tests/plugins/local_etcd.py.)
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
