"""`meshhealth inspect [PREFIX]`: decode meshhealth's etcd entries for humans.

JSON output (default): one object per key and line, `{"key": ..., "value": {...}}` with
the value's wire fields (docs/kvstore.md), or `{"key": ..., "error": "..."}` when the
value does not decode (times as on the wire: unix seconds). `-o text`: the same for
people: an aligned table, times in ISO 8601 (UTC), durations as `status` prints them,
nested maps (a health report's targets and their paths) one per indented line.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from meshhealth.cli.common import (
    ENV_ETCD,
    EXIT_UNAVAILABLE,
    add_etcd_option,
    add_etcd_timeout_option,
    etcd_access_from_args,
    etcd_timeout_from_args,
    print_error,
    usage_error,
)
from meshhealth.terminal_text import escape
from meshhealth.timefmt import format_duration, iso_time
from meshhealth.wire import keys
from meshhealth.wire.fields import TIME_FIELD_NAMES

DESCRIPTION = f"""\
Read every key under PREFIX (default {keys.PREFIX}), decode its value and print it.
Values that do not decode are shown with the reason, not skipped.

examples:
  meshhealth inspect --etcd http://127.0.0.1:2379
  meshhealth inspect meshhealth/state/nodes/ -o text
  {ENV_ETCD}=http://10.0.0.1:2379,http://10.0.0.2:2379 meshhealth inspect
"""


@dataclass(frozen=True, slots=True)
class Row:
    """One key: its decoded value (wire fields) or why it does not decode."""

    key: str
    value: dict[str, object] | None = None
    error: str | None = None


def _kind(key: str) -> keys.KeyKind | None:
    try:
        return keys.parse_key(key).kind
    except keys.InvalidKey:
        return None


def _per_cluster(key: str) -> bool:
    """An aggregator claim or a cluster summary (meshhealth.wire.summary)."""
    return _kind(key) in (keys.KeyKind.AGGREGATOR, keys.KeyKind.SUMMARY)


def decode_rows(items: Sequence[tuple[str, bytes]]) -> list[Row]:
    """Decode (key, value) pairs. Pure."""
    from meshhealth.wire.fields import DecodeError
    from meshhealth.wire.values import (
        decode_cluster_value,
        decode_event_value,
        decode_value,
        to_jsonable,
    )

    rows = []
    for key, data in items:
        try:
            if _per_cluster(key):
                decoded = decode_cluster_value(key, data)
                rows.append(Row(key, value=to_jsonable(decoded)))
            elif _kind(key) is keys.KeyKind.EVENT:
                rows.append(Row(key, value=to_jsonable(decode_event_value(key, data))))
            else:
                rows.append(Row(key, value=to_jsonable(decode_value(key, data))))
        except DecodeError as error:
            rows.append(Row(key, error=str(error)))
    return rows


def format_json(rows: Sequence[Row]) -> str:
    """One JSON object per line (empty string for no rows). Pure."""
    lines = []
    for row in rows:
        obj: dict[str, object] = {"key": row.key}
        if row.error is not None:
            obj["error"] = row.error
        else:
            obj["value"] = row.value
        lines.append(json.dumps(obj, sort_keys=False, ensure_ascii=False))
    return "".join(line + "\n" for line in lines)


def _scalar_text(name: str, field: object) -> str | None:
    """A field shown on its owner's line (`name=text`), or None for a nested one: a point
    in time in ISO 8601 (UTC), a duration (`*_s`) as `status` prints one."""
    if field is None:
        return "-"
    if isinstance(field, list) and all(not isinstance(x, list | dict) for x in field):
        return ",".join(str(x) for x in field) or "-"
    if isinstance(field, list | dict):
        return None
    if isinstance(field, int | float) and not isinstance(field, bool):
        if name in TIME_FIELD_NAMES:
            return iso_time(field) or "-"
        if name.endswith("_s"):
            return format_duration(field)
    return str(field)


def _text_lines(value: Mapping[str, object], depth: int = 0) -> tuple[str, list[str]]:
    """A value's own fields as `name=text` (one line), and one indented line per nested
    map or list of maps under it (`targets[0]: ...`), depth first."""
    parts: list[str] = []
    below: list[str] = []
    for name, field in value.items():
        if name == "v" and depth == 0:
            continue
        text = _scalar_text(name, field)
        if text is not None:
            parts.append(f"{name}={text}")
            continue
        items = (
            [(f"{name}[{i}]", x) for i, x in enumerate(field)]
            if isinstance(field, list)
            else [(name, field)]
        )
        for label, item in items:
            if isinstance(item, Mapping):
                line, deeper = _text_lines(item, depth + 1)
            else:  # (a list in a list: not in any value we write)
                line, deeper = json.dumps(item, ensure_ascii=False), []
            below.append(f"{'  ' * (depth + 1)}{label}: {line}".rstrip())
            below += deeper
    return " ".join(parts), below


def format_text(rows: Sequence[Row]) -> str:
    """An aligned table: KEY then the value's fields as name=value, or ERROR: why; a
    value's nested maps (a health report's targets and paths) on indented lines below,
    one per map; times in ISO 8601, durations as `status` prints them. Pure."""
    if not rows:
        return ""
    import meshhealth.wire.values  # noqa: F401 (every value's table: TIME_FIELD_NAMES)

    # keys and values are anyone's who can write etcd: escaped before they are aligned
    width = max(len("KEY"), *(len(escape(row.key)) for row in rows))
    lines = [f"{'KEY':<{width}}  VALUE"]
    for row in rows:
        if row.error is not None:
            lines.append(f"{escape(row.key):<{width}}  {escape(f'ERROR: {row.error}')}")
            continue
        first, below = _text_lines(row.value or {})
        lines.append(f"{escape(row.key):<{width}}  {escape(first)}".rstrip())
        lines += [f"{'':<{width}}  {escape(line)}" for line in below]
    return "".join(line + "\n" for line in lines)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "inspect",
        help="decode meshhealth's etcd entries to JSON or text",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "prefix", nargs="?", default=keys.PREFIX, metavar="PREFIX", help="key prefix to read"
    )
    add_etcd_option(parser, metavar="URL[,URL...]")
    parser.add_argument(
        "-o", "--output", choices=("json", "text"), default="json", help="output format"
    )
    add_etcd_timeout_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import trio

    from meshhealth.kvstore import EtcdError, EtcdUnavailable, open_etcd

    try:
        access = etcd_access_from_args(args)  # a bad endpoint list, TLS option or file
        timeout_s = etcd_timeout_from_args(args)
    except ValueError as error:
        return usage_error("inspect", str(error))
    prefix: str = args.prefix

    async def fetch() -> list[tuple[str, bytes]]:
        async with open_etcd(access, request_timeout_s=timeout_s, liveness=False) as etcd:
            kvs, _ = await etcd.get_prefix(prefix)
        return [(kv.key, kv.value) for kv in kvs]

    try:
        items = trio.run(fetch)
    except EtcdUnavailable as error:
        print_error("inspect", str(error))
        return EXIT_UNAVAILABLE
    except EtcdError as error:
        print_error("inspect", str(error))
        return 1
    rows = decode_rows(items)
    out = format_text(rows) if args.output == "text" else format_json(rows)
    sys.stdout.write(out)
    sys.stdout.flush()
    return 0
