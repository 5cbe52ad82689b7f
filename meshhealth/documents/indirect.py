"""Indirect probes between agents: the request's query and the answer's document. Pure.

An agent whose direct probe of target T failed asks a helper agent, on the helper's
responder port (4240):

    GET /v1/indirect?cluster=<cluster>&node=<node>[&endpoint=1]

The helper probes T's NodeIP (and T's HealthIP with `endpoint=1`) over ICMP and HTTP,
once, with the probers and per-probe deadlines of its own rounds, and answers 200 with
an `IndirectAnswerDocument` (docs/indirect-probes.md). A request it does not serve is a
4xx with a one-line text reason and costs no probe.

Both sides live here so they cannot drift: `indirect_query` / `parse_indirect_query`
(the request) and `build_answer` / `parse_answer` (the document; the parser checks it
field by field: an answer that does not fit is refused, never trusted).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypedDict

from meshhealth.model import PathReport, ProbeStatus, Protocol, TargetType, path_name
from meshhealth.timefmt import iso_time
from meshhealth.wire.keys import validate_cluster_name, validate_node_name

INDIRECT_PATH = "/v1/indirect"
ANSWER_VERSION = 1
# The most of an answer the requester reads: four paths are a few hundred bytes.
MAX_ANSWER_BYTES = 16 * 1024
_QUERY_KEYS = frozenset({"cluster", "node", "endpoint"})
_PATH_NAMES = frozenset(path_name(t, p) for t in TargetType for p in Protocol)


class IndirectPathDocument(TypedDict):
    """One path the helper probed for the requester."""

    path: str  # node/icmp, node/http, endpoint/icmp, endpoint/http
    ip: str
    status: str  # a ProbeStatus value
    rtt_s: float | None  # mean RTT of the replies, None when none came back
    prober: str  # who probed: "<cluster>/<node>" of the helper


class IndirectAnswerDocument(TypedDict):
    """`GET /v1/indirect` -> 200: what the helper found, path by path."""

    v: int
    helper: str  # "<cluster>/<node>" of the helper that probed
    target: str  # "<cluster>/<node>" of the target probed
    probed_at: str | None  # RFC 3339 UTC, when the probes started
    paths: list[IndirectPathDocument]


@dataclass(frozen=True, slots=True)
class IndirectQuery:
    """A parsed request: which registered node to probe, and whether its HealthIP too."""

    cluster: str
    node: str
    endpoint: bool = False


@dataclass(frozen=True, slots=True)
class Refusal:
    """A request not served: the 4xx status and its one-line reason."""

    status_code: int
    reason: str


@dataclass(frozen=True, slots=True)
class HelperPath:
    """One path of a parsed answer."""

    path: str
    status: ProbeStatus
    rtt_s: float | None

    @property
    def ok(self) -> bool:
        return self.status is ProbeStatus.OK


def indirect_query(query: IndirectQuery) -> str:
    """The request target (path and query) that asks for `query`. Cluster and node
    names are validated names (letters, digits, `-`, `.`): nothing to escape."""
    text = f"{INDIRECT_PATH}?cluster={query.cluster}&node={query.node}"
    return text + "&endpoint=1" if query.endpoint else text


def _query_fields(query: str) -> dict[str, list[str]] | None:
    """`a=1&b=2` as {name: [values]}; None when a part has no `=`. Values are taken as
    they are (no percent-decoding: a valid name never needs it)."""
    fields: dict[str, list[str]] = {}
    for part in query.split("&") if query else ():
        name, equals, value = part.partition("=")
        if not equals or not name:
            return None
        fields.setdefault(name, []).append(value)
    return fields


def parse_indirect_query(method: str, query: str) -> IndirectQuery | Refusal:
    """The request `method /v1/indirect?query`, checked; a Refusal says why not."""
    if method != "GET":
        return Refusal(405, "method not allowed: use GET")
    fields = _query_fields(query)
    if fields is None:
        return Refusal(400, "malformed query")
    unknown = sorted(set(fields) - _QUERY_KEYS)
    if unknown:
        return Refusal(400, f"unknown query field {unknown[0]!r}")
    if any(len(values) != 1 for values in fields.values()):
        return Refusal(400, "a query field is given twice")
    cluster = fields.get("cluster", [""])[0]
    node = fields.get("node", [""])[0]
    if not cluster or not node:
        return Refusal(400, "cluster and node are required")
    try:
        validate_cluster_name(cluster)
        validate_node_name(node)
    except ValueError as exc:
        return Refusal(400, str(exc).splitlines()[0])
    endpoint = fields.get("endpoint", ["0"])[0]
    if endpoint not in ("0", "1"):
        return Refusal(400, "endpoint must be 0 or 1")
    return IndirectQuery(cluster, node, endpoint == "1")


def build_answer(
    *, helper: tuple[str, str], target: tuple[str, str], reports: Iterable[PathReport]
) -> IndirectAnswerDocument:
    """The answer to a served request, from the helper's path reports (one per path)."""
    reports = list(reports)
    prober = "/".join(helper)
    started = [r.result.started_at for r in reports]
    return {
        "v": ANSWER_VERSION,
        "helper": prober,
        "target": "/".join(target),
        "probed_at": iso_time(min(started)) if started else None,
        "paths": [
            {
                "path": path_name(r.path.target_type, r.path.protocol),
                "ip": r.ip,
                "status": r.result.status.value,
                "rtt_s": r.result.rtt_s,
                "prober": prober,
            }
            for r in reports
        ],
    }


def encode_answer(answer: IndirectAnswerDocument) -> bytes:
    return json.dumps(answer, separators=(",", ":")).encode() + b"\n"


class AnswerError(ValueError):
    """An answer that does not fit the document (one line)."""


def parse_answer(body: bytes, *, target: tuple[str, str]) -> dict[str, HelperPath]:
    """The paths of an answer about `target`, keyed by path name; AnswerError when the
    body is not such a document (or is about another target)."""
    if len(body) > MAX_ANSWER_BYTES:
        raise AnswerError(f"answer larger than {MAX_ANSWER_BYTES} bytes")
    try:
        doc = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise AnswerError("answer is not JSON") from None
    if not isinstance(doc, dict) or doc.get("v") != ANSWER_VERSION:
        raise AnswerError("answer is not a version 1 indirect answer")
    if doc.get("target") != "/".join(target):
        raise AnswerError(f"answer is about {doc.get('target')!r}, not {'/'.join(target)!r}")
    paths = doc.get("paths")
    if not isinstance(paths, list):
        raise AnswerError("answer has no paths list")
    found: dict[str, HelperPath] = {}
    for item in paths:
        if not isinstance(item, dict):
            raise AnswerError("a path of the answer is not an object")
        name, status, rtt_s = item.get("path"), item.get("status"), item.get("rtt_s")
        if name not in _PATH_NAMES:
            raise AnswerError(f"unknown path {name!r}")
        try:
            parsed_status = ProbeStatus(str(status))
        except ValueError:
            raise AnswerError(f"unknown status {status!r}") from None
        if rtt_s is not None and not (
            isinstance(rtt_s, int | float) and math.isfinite(rtt_s) and rtt_s >= 0
        ):
            raise AnswerError(f"bad rtt_s {rtt_s!r}")
        found[str(name)] = HelperPath(str(name), parsed_status, rtt_s)
    return found
