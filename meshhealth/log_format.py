"""The agent's log lines, as text or as one JSON object per line (`--log-format`).

    log.info("finding opened: %s", what, extra=event_fields("finding-opened", kind="path"))
    configure_logging("json", level="info", cluster="c1", node="n1")

JSON lines have stable field names: `ts` (RFC 3339 UTC with milliseconds), `level`
(`debug`, `info`, `warning`, `error`, `critical`), `logger`, `msg` (the formatted
message), `cluster`, `node`; a line that records an event adds `event` (its name, such
as `finding-opened`) and that event's fields (`event_fields`), which never replace the
fields above; a line with an exception adds `exc` (its traceback). Text lines are the
ones the agent always wrote (`TIME LEVEL CLUSTER/NODE LOGGER: message`): an event's
fields stay out of them. docs/agent.md "Logs" lists the events and their fields.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
from typing import Literal, TextIO

LogFormat = Literal["text", "json"]
LOG_FORMATS: tuple[LogFormat, ...] = ("text", "json")
_FIELDS_ATTR = "meshhealth_event"  # where event_fields puts its fields on the record
BASE_FIELDS = ("ts", "level", "logger", "msg", "cluster", "node")


def event_fields(event: str, **fields: object) -> dict[str, object]:
    """`extra=` for a log call that records `event` with `fields` (JSON-ready values)."""
    return {_FIELDS_ATTR: {"event": event, **fields}}


class JsonFormatter(logging.Formatter):
    """One JSON object per line (see the module docstring)."""

    def __init__(self, *, cluster: str, node: str) -> None:
        super().__init__()
        self.cluster = cluster
        self.node = node

    def format(self, record: logging.LogRecord) -> str:
        stamp = dt.datetime.fromtimestamp(record.created, tz=dt.UTC)
        out: dict[str, object] = {
            "ts": stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            "cluster": self.cluster,
            "node": self.node,
        }
        fields = getattr(record, _FIELDS_ATTR, None)
        if isinstance(fields, dict):
            for name, value in fields.items():
                out.setdefault(str(name), value)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False, default=str)


def text_formatter(*, cluster: str, node: str) -> logging.Formatter:
    return logging.Formatter(f"%(asctime)s %(levelname)s {cluster}/{node} %(name)s: %(message)s")


def configure_logging(
    log_format: LogFormat, *, level: str, cluster: str, node: str, stream: TextIO | None = None
) -> None:
    """The root logger writes `log_format` lines at `level` to `stream` (stderr)."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonFormatter(cluster=cluster, node=node))
    else:
        handler.setFormatter(text_formatter(cluster=cluster, node=node))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
