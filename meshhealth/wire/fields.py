"""Declaration-driven validation of the etcd values: a value is a table of `Field`s
(wire name, check, default) and one generic reader and writer interpret the table, so
every value is checked the same way and every error names the field's place
(`targets[0].paths["node/icmp"].loss`). Checks are small combinators over untrusted,
already-unpacked msgpack data; the limits they take are named in the value's module.
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, is_dataclass
from enum import Enum
from typing import Any

from meshhealth.wire import keys

MAX_TEXT_CHARS = 256  # version, labels, capabilities

Check = Callable[[object, str], Any]  # (raw value, its place) -> the decoded value
_REQUIRED: Any = object()
_TABLES: dict[type, Sequence[Field]] = {}  # record types -> their tables, for `plain`


class DecodeError(ValueError):
    """A value that does not decode or validate (the only error decode functions raise)."""


@dataclass(frozen=True, slots=True)
class Field:
    """One wire field: `check` reads it; without a `default` it must be present.

    An optional field that is absent or nil reads as `default`, and is left out on the
    wire when it holds `default` (unless `always`). `attr` names the model attribute
    when it differs from the wire name; `get` computes the wire form from the object
    (else `plain` makes it from the attribute)."""

    name: str
    check: Check
    default: Any = _REQUIRED
    always: bool = False
    attr: str = ""
    get: Callable[[Any], object] | None = None


def read(m: Mapping[str, object], table: Sequence[Field], where: str = "") -> dict[str, Any]:
    """The fields of `table` in map `m`, by model attribute, checked in table order."""
    found: dict[str, Any] = {}
    for f in table:
        raw = m.get(f.name)
        if f.default is not _REQUIRED and raw is None:
            found[f.attr or f.name] = f.default.copy() if isinstance(f.default, dict) else f.default
        elif f.name not in m:
            raise DecodeError(f"missing field '{join(where, f.name)}'")
        else:
            found[f.attr or f.name] = f.check(raw, join(where, f.name))
    return found


def write(obj: object, table: Sequence[Field]) -> dict[str, object]:
    """The wire map of `obj` by `table` (defaults of optional fields left out)."""
    wire: dict[str, object] = {}
    for f in table:
        value = f.get(obj) if f.get else plain(getattr(obj, f.attr or f.name))
        if f.default is _REQUIRED or f.always or value != plain(f.default):
            wire[f.name] = value
    return wire


def plain(value: object) -> object:
    """Tuples as lists, maps sorted by key, enums as their value, records by their
    table: the wire's forms."""
    table = _TABLES.get(type(value))
    if table is not None:
        return write(value, table)
    if isinstance(value, tuple | list):
        return [plain(x) for x in value]
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in sorted(value.items())}
    if isinstance(value, Enum):
        return value.value
    return value


def record(table: Sequence[Field], build: Callable[..., Any]) -> Check:
    """A nested map read by `table` into `build(**fields)` (a type: written by `table`)."""
    if is_dataclass(build):
        _TABLES[build] = table

    def check(value: object, where: str) -> Any:
        return build(**read(a_map(value, where), table, where))

    return check


def a_map(value: object, where: str) -> Mapping[str, object]:
    if not isinstance(value, dict):
        raise DecodeError(f"field '{where}': must be a map, got {type_name(value)}")
    return value


def map_of(key: Check, item: Check, cap: int) -> Check:
    """A map of at most `cap` items, keys and values checked, sorted by key."""

    def check(value: object, where: str) -> dict[str, Any]:
        m = a_map(value, where)
        if len(m) > cap:
            raise DecodeError(f"field '{where}': {len(m)} items, at most {cap}")
        out = {}
        for name, raw in m.items():
            ref = key(name, where)
            out[ref] = item(raw, f"{where}.{ref}")
        return dict(sorted(out.items()))

    return check


def list_of(item: Check, cap: int, *, of: type = str, tail: str = " allowed") -> Check:
    """A list of at most `cap` items of type `of` (all checked first), then each item
    checked at `where[i]`; the result is a tuple."""

    def check(value: object, where: str) -> tuple[Any, ...]:
        if not isinstance(value, list):
            raise DecodeError(f"field '{where}': must be a list, got {type_name(value)}")
        if len(value) > cap:
            raise DecodeError(f"field '{where}': {len(value)} items, at most {cap}{tail}")
        want = "a map" if of is dict else "a string"
        for i, x in enumerate(value):
            if of is not object and not isinstance(x, of):
                raise DecodeError(f"field '{where}[{i}]': must be {want}, got {type_name(x)}")
        return tuple(item(x, f"{where}[{i}]") for i, x in enumerate(value))

    return check


def nullable(inner: Check) -> Check:
    """A field that must be present but may be nil (None)."""
    return lambda value, where: None if value is None else inner(value, where)


def string(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise DecodeError(f"field '{where}': must be a string, got {type_name(value)}")
    return value


def text(max_chars: int = MAX_TEXT_CHARS, *, allow_empty: bool = False) -> Check:
    def check(value: object, where: str) -> str:
        s = string(value, where)
        if not s and not allow_empty:
            raise DecodeError(f"field '{where}': must not be empty")
        if len(s) > max_chars:
            raise DecodeError(f"field '{where}': longer than {max_chars} characters")
        return s

    return check


def pattern(regex: str, what: str) -> Check:
    """A string matching `regex`, else `what` (which may use {got}) is the message."""
    compiled = re.compile(regex)

    def check(value: object, where: str) -> str:
        s = string(value, where)
        if not compiled.fullmatch(s):
            raise DecodeError(f"field '{where}': " + what.format(got=short(s)))
        return s

    return check


def choice(enum_type: type[Enum], what: str) -> Check:
    """A string naming one of `enum_type`'s values."""

    def check(value: object, where: str) -> Enum:
        s = string(value, where)
        try:
            return enum_type(s)
        except ValueError:
            raise DecodeError(
                f"field '{where}': unknown {what} {short(s)}, expected one of "
                + ", ".join(str(e.value) for e in enum_type)
            ) from None

    return check


def one_of(choices: Sequence[str]) -> Check:
    def check(value: object, where: str) -> str:
        if value not in choices:
            raise DecodeError(
                f"field '{where}': must be one of {', '.join(choices)}, got {short(value)}"
            )
        return str(value)

    return check


def integer(low: int, high: int) -> Check:
    def check(value: object, where: str) -> int:
        if type(value) is not int:  # bool is an int subclass: refuse it
            raise DecodeError(f"field '{where}': must be an integer, got {type_name(value)}")
        if not low <= value <= high:
            raise DecodeError(f"field '{where}': must be {low}..{high}, got {value}")
        return value

    return check


def count(high: int) -> Check:
    """An integer 0..high, refused in one message."""

    def check(value: object, where: str) -> int:
        if type(value) is not int or not 0 <= value <= high:
            raise DecodeError(f"field '{where}': must be an integer 0..{high}, got {short(value)}")
        return value

    return check


def boolean(value: object, where: str) -> bool:
    if not isinstance(value, bool):
        raise DecodeError(f"field '{where}': must be true or false, got {type_name(value)}")
    return value


def number(value: object, where: str) -> float:
    """A finite float; ints are accepted too (other writers may send 1700000000)."""
    if type(value) not in (int, float):
        raise DecodeError(f"field '{where}': must be a number, got {type_name(value)}")
    try:
        value_f = float(value)  # type: ignore[arg-type]
    except OverflowError:
        raise DecodeError(f"field '{where}': number out of range") from None
    if not math.isfinite(value_f):
        raise DecodeError(f"field '{where}': must be finite, got {value_f}")
    return value_f


def fraction(value: object, where: str) -> float:
    """A number 0..1 (loss, confidence)."""
    value_f = number(value, where)
    if not 0.0 <= value_f <= 1.0:
        raise DecodeError(f"field '{where}': must be 0..1, got {value_f}")
    return value_f


def seconds(value: object, where: str) -> float:
    """A time or duration in seconds: a finite number >= 0."""
    value_s = number(value, where)
    if value_s < 0:
        raise DecodeError(f"field '{where}': must not be negative, got {value_s}")
    return value_s


def positive_seconds(value: object, where: str) -> float:
    value_s = seconds(value, where)
    if value_s <= 0:
        raise DecodeError(f"field '{where}': must be > 0, got {value_s}")
    return value_s


def _validated(validate: Callable[[str], str]) -> Check:
    """A string `validate` accepts (its ValueError names the problem)."""

    def check(value: object, where: str) -> str:
        try:
            return validate(string(value, where))
        except ValueError as error:
            raise DecodeError(f"field '{where}': {error}") from None

    return check


def _cidr(value: str) -> str:
    try:
        network = ipaddress.ip_network(value, strict=True)
    except ValueError as error:
        raise ValueError(f"invalid CIDR {short(value)}: {error}") from None
    if isinstance(network, ipaddress.IPv6Network) and network.network_address.scope_id:
        raise ValueError(f"invalid CIDR {short(value)}: scoped")
    return str(network)


def _node_ref(value: str) -> str:
    cluster, _, node = value.partition("/")
    try:
        keys.validate_cluster_name(cluster)
        keys.validate_node_name(node)
    except ValueError as error:
        raise ValueError(f"{short(value)} is not cluster/node: {error}") from None
    return value


ip = _validated(keys.canonical_ip)
cidr = _validated(_cidr)
cluster_name = _validated(keys.validate_cluster_name)
node_name = _validated(keys.validate_node_name)
node_ref = _validated(_node_ref)  # `cluster/node`, both parts valid


def join(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def type_name(value: object) -> str:
    if value is None:
        return "nil"
    names = {bool: "a boolean", int: "an integer", float: "a float", str: "a string"}
    names |= {bytes: "binary", list: "a list", dict: "a map"}
    return names.get(type(value), type(value).__name__)


def short(value: object) -> str:
    quoted = repr(value)
    return quoted if len(quoted) <= 80 else quoted[:80] + "..."
