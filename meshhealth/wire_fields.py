"""Checks of single wire fields for meshhealth.codec; each error names the field.

Pure helpers over already-unpacked msgpack data (`object`s from untrusted input).
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Mapping
from typing import TypeVar

from meshhealth import keys

MAX_TEXT_CHARS = 256  # version, labels, capabilities

_T = TypeVar("_T")


class DecodeError(ValueError):
    """A value that does not decode or validate (the only error decode functions raise)."""


def field(m: Mapping[str, object], name: str, where: str = "") -> object:
    if name not in m:
        raise DecodeError(f"missing field '{join(where, name)}'")
    return m[name]


def join(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def string(m: Mapping[str, object], name: str, where: str = "") -> str:
    return as_string(field(m, name, where), join(where, name))


def as_string(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise DecodeError(f"field '{where}': must be a string, got {type_name(value)}")
    return value


def text(value: str, where: str, *, allow_empty: bool = False) -> str:
    if not value and not allow_empty:
        raise DecodeError(f"field '{where}': must not be empty")
    if len(value) > MAX_TEXT_CHARS:
        raise DecodeError(f"field '{where}': longer than {MAX_TEXT_CHARS} characters")
    return value


def integer(m: Mapping[str, object], name: str, low: int, high: int, where: str = "") -> int:
    value = field(m, name, where)
    if type(value) is not int:  # bool is an int subclass: refuse it
        raise DecodeError(
            f"field '{join(where, name)}': must be an integer, got {type_name(value)}"
        )
    if not low <= value <= high:
        raise DecodeError(f"field '{join(where, name)}': must be {low}..{high}, got {value}")
    return value


def boolean(m: Mapping[str, object], name: str, where: str = "") -> bool:
    value = field(m, name, where)
    if not isinstance(value, bool):
        raise DecodeError(
            f"field '{join(where, name)}': must be true or false, got {type_name(value)}"
        )
    return value


def number(value: object, where: str) -> float:
    """A float; ints are accepted too (other writers may send 1700000000)."""
    if type(value) not in (int, float):
        raise DecodeError(f"field '{where}': must be a number, got {type_name(value)}")
    try:
        value_f = float(value)  # type: ignore[arg-type]
    except OverflowError:
        raise DecodeError(f"field '{where}': number out of range") from None
    if not math.isfinite(value_f):
        raise DecodeError(f"field '{where}': must be finite, got {value_f}")
    return value_f


def seconds(value: object, where: str) -> float:
    """A time or duration in seconds: a finite number >= 0."""
    value_s = number(value, where)
    if value_s < 0:
        raise DecodeError(f"field '{where}': must not be negative, got {value_s}")
    return value_s


def list_of(m: Mapping[str, object], name: str, item_type: type[_T], cap: int) -> list[_T]:
    value = field(m, name)
    if not isinstance(value, list):
        raise DecodeError(f"field '{name}': must be a list, got {type_name(value)}")
    if len(value) > cap:
        raise DecodeError(f"field '{name}': {len(value)} items, at most {cap} allowed")
    for i, item in enumerate(value):
        if not isinstance(item, item_type):
            want = "a map" if item_type is dict else "a string"
            raise DecodeError(f"field '{name}[{i}]': must be {want}, got {type_name(item)}")
    return value


def ip(value: str, where: str) -> str:
    try:
        return keys.canonical_ip(value)
    except ValueError as error:
        raise DecodeError(f"field '{where}': {error}") from None


def cidr(value: str, where: str) -> str:
    try:
        network = ipaddress.ip_network(value, strict=True)
    except ValueError as error:
        raise DecodeError(f"field '{where}': invalid CIDR {short(value)}: {error}") from None
    if isinstance(network, ipaddress.IPv6Network) and network.network_address.scope_id:
        raise DecodeError(f"field '{where}': invalid CIDR {short(value)}: scoped")
    return str(network)


def cluster_name(m: Mapping[str, object], name: str, where: str = "") -> str:
    value = string(m, name, where)
    try:
        return keys.validate_cluster_name(value)
    except ValueError as error:
        raise DecodeError(f"field '{join(where, name)}': {error}") from None


def node_name(m: Mapping[str, object], name: str, where: str = "") -> str:
    value = string(m, name, where)
    try:
        return keys.validate_node_name(value)
    except ValueError as error:
        raise DecodeError(f"field '{join(where, name)}': {error}") from None


def type_name(value: object) -> str:
    if value is None:
        return "nil"
    names = {bool: "a boolean", int: "an integer", float: "a float", str: "a string"}
    names |= {bytes: "binary", list: "a list", dict: "a map"}
    return names.get(type(value), type(value).__name__)


def short(value: object) -> str:
    quoted = repr(value)
    return quoted if len(quoted) <= 80 else quoted[:80] + "..."
