"""etcd adapter on trio: client (requests, leases, liveness), prefix watch with resume,
TLS and authentication (transport, tls, etcd_config), reconnecting on new files (reload).

(The tests' local etcd server is a fixture: tests/plugins/local_etcd.py.)
"""

import os

# gRPC's C core writes its own lines about failed TLS handshakes to stderr (before any
# of our code can catch them); we report each failure in one line of our own. Set
# before grpc is first imported; GRPC_VERBOSITY=DEBUG in the environment still wins.
os.environ.setdefault("GRPC_VERBOSITY", "NONE")

from meshhealth.backoff import Backoff
from meshhealth.kvstore.client import Etcd, open_etcd
from meshhealth.kvstore.errors import EtcdError, EtcdUnavailable
from meshhealth.kvstore.health import EtcdHealth, EtcdStats
from meshhealth.kvstore.messages import (
    KV,
    Delete,
    Get,
    KeyAbsent,
    LeaseIs,
    ModRevisionIs,
    Put,
    TxnResult,
)
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
    "ModRevisionIs",
    "PrefixWatch",
    "Put",
    "ResyncNeeded",
    "StoreReset",
    "TxnResult",
    "WatchBatch",
    "WatchEvent",
    "open_etcd",
]
