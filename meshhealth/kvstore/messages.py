"""What goes into and comes out of etcd requests: KV, transaction compares and
operations, and their protobuf messages (etcd3's `etcdrpc`). No I/O."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from etcd3 import etcdrpc


@dataclass(frozen=True, slots=True)
class KV:
    key: str  # UTF-8 (undecodable bytes shown as \\x.. escapes)
    value: bytes
    mod_revision: int
    create_revision: int
    lease_id: int  # 0 when the key has no lease


# --- transactions: compares and operations ------------------------------------------


@dataclass(frozen=True, slots=True)
class KeyAbsent:
    """Compare: `key` does not exist (create_revision == 0)."""

    key: str


@dataclass(frozen=True, slots=True)
class LeaseIs:
    """Compare: `key` exists and is attached to lease `lease_id`."""

    key: str
    lease_id: int


@dataclass(frozen=True, slots=True)
class ModRevisionIs:
    """Compare: `key` was last written at `mod_revision` (0: it does not exist)."""

    key: str
    mod_revision: int


@dataclass(frozen=True, slots=True)
class Put:
    key: str
    value: bytes
    lease_id: int | None = None


@dataclass(frozen=True, slots=True)
class Get:
    key: str


@dataclass(frozen=True, slots=True)
class Delete:
    key: str


Compare = KeyAbsent | LeaseIs | ModRevisionIs
Op = Put | Get | Delete


@dataclass(frozen=True, slots=True)
class TxnResult:
    succeeded: bool
    revision: int
    gets: tuple[tuple[KV, ...], ...]  # one entry per Get of the branch that ran, in order


def to_bytes(text: str | bytes) -> bytes:
    return text if isinstance(text, bytes) else text.encode("utf-8")


def kv_from_message(raw: Any) -> KV:
    return KV(
        key=bytes(raw.key).decode("utf-8", "backslashreplace"),
        value=bytes(raw.value),
        mod_revision=int(raw.mod_revision),
        create_revision=int(raw.create_revision),
        lease_id=int(raw.lease),
    )


def compare_message(compare: Compare) -> Any:
    if isinstance(compare, KeyAbsent):
        return etcdrpc.Compare(
            key=to_bytes(compare.key),
            target=etcdrpc.Compare.CREATE,
            result=etcdrpc.Compare.EQUAL,
            create_revision=0,
        )
    if isinstance(compare, ModRevisionIs):
        return etcdrpc.Compare(
            key=to_bytes(compare.key),
            target=etcdrpc.Compare.MOD,
            result=etcdrpc.Compare.EQUAL,
            mod_revision=compare.mod_revision,
        )
    return etcdrpc.Compare(
        key=to_bytes(compare.key),
        target=etcdrpc.Compare.LEASE,
        result=etcdrpc.Compare.EQUAL,
        lease=compare.lease_id,
    )


def op_message(op: Op) -> Any:
    if isinstance(op, Put):
        put = etcdrpc.PutRequest(key=to_bytes(op.key), value=op.value, lease=op.lease_id or 0)
        return etcdrpc.RequestOp(request_put=put)
    if isinstance(op, Get):
        return etcdrpc.RequestOp(request_range=etcdrpc.RangeRequest(key=to_bytes(op.key)))
    return etcdrpc.RequestOp(request_delete_range=etcdrpc.DeleteRangeRequest(key=to_bytes(op.key)))
