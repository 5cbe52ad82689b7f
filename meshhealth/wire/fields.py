"""Declaration-driven validation of the etcd values: a value is a table of `Field`s
(wire name, check, default) and one generic reader and writer interpret the table, so
every value is checked the same way and every error names the field's place
(`targets[0].paths["node/icmp"].loss`). Checks are small combinators over untrusted,
already-unpacked msgpack data; the limits they take are named in the value's module.
Every string field is read by `string`, which refuses control and bidi characters
(`clean_text`): a value that holds one does not decode.
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, is_dataclass
from enum import Enum
from typing import Any

from meshhealth import terminal_text
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
    wire when it holds `default` (unless `always`). The model attribute has the field's
    name; `get`, when given, computes the wire form from the whole object instead."""

    name: str
    check: Check
    default: Any = _REQUIRED
    always: bool = False
    get: Callable[[Any], object] | None = None


def read(m: Mapping[str, object], table: Sequence[Field], where: str = "") -> dict[str, Any]:
    """The fields of `table` in map `m`, by name, checked in table order."""
    found: dict[str, Any] = {}
    for f in table:
        raw = m.get(f.name)
        if f.default is not _REQUIRED and raw is None:
            found[f.name] = f.default.copy() if isinstance(f.default, dict) else f.default
        elif f.name not in m:
            raise DecodeError(f"missing field '{join(where, f.name)}'")
        else:
            found[f.name] = f.check(raw, join(where, f.name))
    return found


def write(obj: object, table: Sequence[Field]) -> dict[str, object]:
    """The wire map of `obj` by `table` (defaults of optional fields left out)."""
    wire: dict[str, object] = {}
    for f in table:
        value = f.get(obj) if f.get else plain(getattr(obj, f.name))
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
    """A map whose keys are all text (msgpack may carry bytes or numbers as keys)."""
    if not isinstance(value, dict):
        raise DecodeError(f"field '{where}': must be a map, got {type_name(value)}")
    for key in value:
        if not isinstance(key, str):
            raise DecodeError(f"field '{where}': a key is {type_name(key)}, not text: {short(key)}")
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


def typed(test: Callable[[object], bool], want: str) -> Check:
    """A value `test` accepts, else "must be `want`, got <its type>"."""

    def check(value: object, where: str) -> Any:
        if not test(value):
            raise DecodeError(f"field '{where}': must be {want}, got {type_name(value)}")
        return value

    return check


def rule(inner: Check, ok: Callable[[Any], object], message: str) -> Check:
    """`inner`'s value if `ok` accepts it, else `message` ({got}: the value, {short}: it
    quoted and shortened)."""

    def check(value: object, where: str) -> Any:
        got = inner(value, where)
        if not ok(got):
            raise DecodeError(f"field '{where}': " + message.format(got=got, short=short(got)))
        return got

    return check


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


_UNSAFE_CHAR = re.compile(
    "[" + "".join(re.escape(chr(c)) for c in sorted(terminal_text.UNSAFE_CODES)) + "]"
)


def clean_text(value: str, where: str) -> str:
    """`value` unless it holds a control character (C0, DEL, C1), a bidi control
    (embedding, override, isolate, mark) or a line separator: every character
    `terminal_text.escape` would show escaped. The one rule for every string of every
    value, so nothing read from etcd can steer a terminal or reorder what users read."""
    found = _UNSAFE_CHAR.search(value)
    if found is not None:
        raise DecodeError(
            f"field '{where}': holds the control or bidi character "
            f"{terminal_text.escape(found.group())} at position {found.start()}"
        )
    return value


def string(value: object, where: str) -> str:
    """A string (every string field is one): clean text, see `clean_text`."""
    if not isinstance(value, str):
        raise DecodeError(f"field '{where}': must be a string, got {type_name(value)}")
    return clean_text(value, where)


boolean = typed(lambda v: isinstance(v, bool), "true or false")
fraction = rule(number, lambda v: 0.0 <= v <= 1.0, "must be 0..1, got {got}")  # loss, confidence
seconds = rule(number, lambda v: v >= 0, "must not be negative, got {got}")  # a time or duration
positive_seconds = rule(seconds, lambda v: v > 0, "must be > 0, got {got}")

# The names of the fields that hold a point in time (unix seconds on the wire), as
# `time_field` declares them: readers for people (`inspect -o text`) show them in ISO 8601.
TIME_FIELD_NAMES: set[str] = set()


def time_field(name: str, *, allow_nil: bool = False, default: Any = _REQUIRED) -> Field:
    """A field holding a point in time: unix seconds (a float) on the wire."""
    TIME_FIELD_NAMES.add(name)
    return Field(name, nullable(seconds) if allow_nil else seconds, default)


def text(max_chars: int = MAX_TEXT_CHARS, *, allow_empty: bool = False) -> Check:
    not_empty = rule(string, lambda s: s or allow_empty, "must not be empty")
    return rule(not_empty, lambda s: len(s) <= max_chars, f"longer than {max_chars} characters")


def pattern(regex: str, message: str) -> Check:
    return rule(string, re.compile(regex).fullmatch, message)


def one_of(choices: Sequence[str]) -> Check:
    return rule(
        lambda v, _: v, choices.__contains__, f"must be one of {', '.join(choices)}, got {{short}}"
    )


def choice(enum_type: type[Enum], what: str) -> Check:
    """A string naming one of `enum_type`'s values, as that enum."""
    names = ", ".join(str(e.value) for e in enum_type)
    named = rule(
        string,
        lambda s: s in {e.value for e in enum_type},
        f"unknown {what} {{short}}, expected one of {names}",
    )
    return lambda value, where: enum_type(named(value, where))


def integer(low: int, high: int) -> Check:
    an_int = typed(lambda v: type(v) is int, "an integer")  # bool is an int subclass: refused
    return rule(an_int, lambda v: low <= v <= high, f"must be {low}..{high}, got {{got}}")


def count(high: int) -> Check:
    """An integer 0..high, refused in one message."""
    return rule(
        lambda v, _: v,
        lambda v: type(v) is int and 0 <= v <= high,
        f"must be an integer 0..{high}, got {{short}}",
    )


def _validated(validate: Callable[[str], str]) -> Check:
    """A string `validate` accepts (its ValueError names the problem)."""

    def check(value: object, where: str) -> str:
        s = string(value, where)
        try:
            return validate(s)
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
event_id = _validated(keys.validate_event_id)  # a finding event's id


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
