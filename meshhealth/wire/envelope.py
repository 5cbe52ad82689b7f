"""The envelope of every etcd value: a msgpack map of at most MAX_VALUE_BYTES with the
schema version `v`, and `Codec`, a value's reader and writer around it. Unpacking
treats its input as untrusted (DecodeError naming what is wrong); encoding validates
through the reader first and emits its canonical form, so what is written reads back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import msgpack

from meshhealth import defaults
from meshhealth.wire import fields as f
from meshhealth.wire.fields import DecodeError

SCHEMA_VERSION = 1
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Codec(Generic[T]):
    """A value's codec: `read` (wire map -> model, DecodeError) and `write` (model -> the
    wire map without `v`)."""

    what: str
    read: Callable[[Mapping[str, object]], T]
    write: Callable[[T], dict[str, object]]

    @staticmethod
    def of(
        what: str,
        build: Callable[..., T],
        table: Sequence[f.Field],
        check: Callable[[T], T] = lambda value: value,
    ) -> Codec[T]:
        """The codec of a model type whose wire map is `table`; `check` then sees the
        value (rules across fields)."""
        return Codec(what, lambda m: check(build(**f.read(m, table))), lambda v: f.write(v, table))

    def to_wire(self, value: T) -> dict[str, object]:
        """The wire map, `v` included (JSON-ready)."""
        return {"v": SCHEMA_VERSION, **self.write(value)}

    def encode(self, value: T) -> bytes:
        try:
            checked = self.to_wire(self.read(self.to_wire(value)))
        except DecodeError as error:
            raise ValueError(f"cannot encode {self.what}: {error}") from None
        data: bytes = msgpack.packb(checked, use_bin_type=True)
        if len(data) > defaults.MAX_VALUE_BYTES:
            raise ValueError(
                f"cannot encode {self.what}: {len(data)} bytes, more than "
                f"{defaults.MAX_VALUE_BYTES}"
            )
        return data

    def decode(self, data: bytes) -> T:
        return self.read(unpack_map(data))


def unpack_map(data: bytes) -> Mapping[str, object]:
    """The msgpack map of a value, its size and schema version checked (DecodeError)."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise DecodeError(f"value must be bytes, got {type(data).__name__}")
    size = len(bytes(data)) if isinstance(data, memoryview) else len(data)
    if size > defaults.MAX_VALUE_BYTES:
        raise DecodeError(f"value is {size} bytes, more than {defaults.MAX_VALUE_BYTES}")
    try:
        obj = msgpack.unpackb(data, raw=False, strict_map_key=True, use_list=True)
    except (
        msgpack.UnpackException,
        ValueError,  # ExtraData, FormatError, StackError, UnicodeDecodeError, bad keys
        TypeError,
        OverflowError,
        RecursionError,
    ) as error:
        raise DecodeError(f"not valid msgpack: {str(error) or type(error).__name__}") from None
    if not isinstance(obj, dict):
        raise DecodeError(f"value must be a msgpack map, got {f.type_name(obj)}")
    if "v" not in obj:
        raise DecodeError("missing field 'v' (schema version)")
    if type(obj["v"]) is not int:
        raise DecodeError(f"field 'v': must be an integer, got {f.type_name(obj['v'])}")
    if obj["v"] != SCHEMA_VERSION:
        raise DecodeError(
            f"field 'v': unsupported schema version {obj['v']} (this meshhealth reads "
            f"version {SCHEMA_VERSION})"
        )
    return obj
