"""The envelope of every etcd value: a msgpack map of at most MAX_VALUE_BYTES with the
schema version `v`. Unpacking treats its input as untrusted (DecodeError naming what
is wrong); packing validates through the value's decoder first, so what is written can
be read back, and emits the decoder's canonical form.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import msgpack

from meshhealth import defaults
from meshhealth.wire.fields import DecodeError, type_name

SCHEMA_VERSION = 1


def pack(
    what: str,
    wire: dict[str, object],
    canonical: Callable[[Mapping[str, object]], dict[str, object]],
) -> bytes:
    """The bytes of `wire` after `canonical` (decode, then back to a map) accepted it."""
    try:
        checked = canonical(wire)
    except DecodeError as error:
        raise ValueError(f"cannot encode {what}: {error}") from None
    data: bytes = msgpack.packb(checked, use_bin_type=True)
    if len(data) > defaults.MAX_VALUE_BYTES:
        raise ValueError(
            f"cannot encode {what}: {len(data)} bytes, more than {defaults.MAX_VALUE_BYTES}"
        )
    return data


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
        detail = str(error) or type(error).__name__
        raise DecodeError(f"not valid msgpack: {detail}") from None
    if not isinstance(obj, dict):
        raise DecodeError(f"value must be a msgpack map, got {type_name(obj)}")
    if "v" not in obj:
        raise DecodeError("missing field 'v' (schema version)")
    version = obj["v"]
    if type(version) is not int:
        raise DecodeError(f"field 'v': must be an integer, got {type_name(version)}")
    if version != SCHEMA_VERSION:
        raise DecodeError(
            f"field 'v': unsupported schema version {version} (this meshhealth reads "
            f"version {SCHEMA_VERSION})"
        )
    return obj
