"""The typed documents are what the builders really produce: every status document,
healthz answer, matrix document and feed message built from the stories matches its
TypedDict in meshhealth.documents (keys, their order in the JSON, and value types)."""

from __future__ import annotations

import enum
import json
import types
import typing
from typing import Any, Literal, NotRequired, Required, get_args, get_origin, get_type_hints

import pytest

from meshhealth.documents import feed, matrix, matrix_json, status, status_schema
from meshhealth.model import PathKey, ProbeResult, ProbeStatus, Protocol, RoundReport, TargetType
from meshhealth.probe.stats import StatsBook
from tests import matrix_stories, status_stories


def _is_typeddict(kind: object) -> bool:
    return isinstance(kind, type) and typing.is_typeddict(kind)


def shape_errors(value: object, kind: Any, where: str = "$") -> list[str]:
    """Where `value` (plain JSON types) does not match the annotation `kind`."""
    origin = get_origin(kind)
    if origin in (Required, NotRequired):
        return shape_errors(value, get_args(kind)[0], where)
    if origin in (types.UnionType, typing.Union):
        options = [shape_errors(value, option, where) for option in get_args(kind)]
        return [] if any(not errors for errors in options) else min(options, key=len)
    if origin is Literal:
        return [] if value in get_args(kind) else [f"{where}: {value!r} not in {get_args(kind)}"]
    if isinstance(kind, type) and issubclass(kind, enum.StrEnum):  # JSON holds its values
        values = [member.value for member in kind]
        return [] if value in values else [f"{where}: {value!r} not in {kind.__name__} {values}"]
    if kind is type(None):
        return [] if value is None else [f"{where}: {value!r} is not None"]
    if _is_typeddict(kind):
        if not isinstance(value, dict):
            return [f"{where}: {type(value).__name__}, not a {kind.__name__}"]
        hints = get_type_hints(kind, include_extras=True)
        required = [k for k in hints if get_origin(hints[k]) is not NotRequired]
        present = [k for k in hints if k in value]
        errors = []
        if missing := set(required) - set(value):
            errors.append(f"{where}: {kind.__name__} misses {sorted(missing)}")
        if extra := set(value) - set(hints):
            errors.append(f"{where}: {kind.__name__} has undeclared {sorted(extra)}")
        if [k for k in value if k in hints] != present:
            errors.append(f"{where}: key order {list(value)} is not {kind.__name__}'s")
        for key in present:
            errors += shape_errors(value[key], hints[key], f"{where}.{key}")
        return errors
    if origin is list:
        if not isinstance(value, list):
            return [f"{where}: not a list"]
        return [
            e
            for i, v in enumerate(value)
            for e in shape_errors(v, get_args(kind)[0], f"{where}[{i}]")
        ]
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{where}: not an object"]
        return [
            e for k, v in value.items() for e in shape_errors(v, get_args(kind)[1], f"{where}.{k}")
        ]
    if kind is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    elif kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, kind)
    return [] if ok else [f"{where}: {value!r} is not {kind.__name__}"]


def assert_shape(value: object, kind: Any) -> None:
    value = json.loads(json.dumps(value))  # what a client reads back
    assert shape_errors(value, kind) == []


@pytest.mark.parametrize("story", sorted(status_stories.STORIES))
def test_status_documents_match_their_type(story: str) -> None:
    assert_shape(
        status.build_status_document(status_stories.STORIES[story]()),
        status_schema.StatusDocument,
    )


def test_the_checker_catches_a_wrong_document() -> None:
    doc: Any = status.build_status_document(status_stories.endpoint_forward_drop())
    doc["nodes"][0]["host"]["primary_address"]["icmp"]["samples"] = "3"
    del doc["summary"]["total"]
    doc["extra"] = 1
    errors = shape_errors(doc, status_schema.StatusDocument)
    assert len(errors) == 3, errors
    reordered = {"probe_time": doc["probe_time"], **doc}
    assert any("key order" in e for e in shape_errors(reordered, status_schema.StatusDocument))


def test_healthz_matches_its_type() -> None:
    doc = status.build_healthz_document(
        started_at=100.0, now=112.5, etcd=status.EtcdState(up=True, since=101.0)
    )
    assert_shape(doc, status_schema.HealthzDocument)
    assert_shape({**doc, "registered": True}, status_schema.HealthzDocument)


@pytest.mark.parametrize("story", sorted(matrix_stories.STORIES))
def test_matrix_documents_match_their_type(story: str) -> None:
    built = matrix.build_matrix(matrix_stories.STORIES[story](), now=matrix_stories.NOW)
    assert_shape(matrix_json.matrix_document(built), matrix_json.MatrixDocument)


def test_feed_messages_match_their_types() -> None:
    inputs = status_stories.endpoint_forward_drop()
    doc = status.build_status_document(inputs)
    assert_shape(feed.snapshot_message(doc, 7), feed.SnapshotMessage)
    assert_shape(feed.round_message(doc, 0.25, 8), feed.RoundMessage)
    assert_shape(feed.lagging_message("too slow", 3), feed.LaggingMessage)
    book = StatsBook(10)
    key = PathKey("lab1", "node2", TargetType.ENDPOINT, Protocol.HTTP)
    book.add(key, ProbeResult(ProbeStatus.OK, 100.0, (0.001,), received=1))
    summary = book.summary(key)
    assert summary is not None
    assert_shape(feed.path_message(key, "10.1.0.2", summary, ["status"], 9), feed.PathMessage)
    assert RoundReport  # the round message is built from the status document, not a report


def test_the_events_document_matches_its_type() -> None:
    from meshhealth.documents import events
    from meshhealth.wire.event import FindingEvent

    t0 = matrix_stories.NOW
    closed = FindingEvent(
        "lab1", "1795000000000-0123456789ab", "partition", ("lab1/n2",), 1.0, "split", t0,
        t0 + 60, (("lab1/n1",), ("lab1/n2",)), "n1", "n3",
    )  # fmt: skip
    still = FindingEvent("lab1", "1795000100000-0123456789ab", "path", ("lab1/a",), 0.5, "x", t0)
    doc = events.events_document([closed, still], now=t0 + 120, since=t0 - 3600)
    assert_shape(json.loads(json.dumps(doc)), events.EventsJSON)
    assert doc["events"][1]["closed_at"] is None and doc["events"][1]["duration_s"] == 120.0
    assert_shape(events.events_document([], now=t0, since=None), events.EventsJSON)


@pytest.mark.parametrize("story", sorted(matrix_stories.STORIES))
def test_the_findings_documents_match_their_type(story: str) -> None:
    """`meshhealth diagnose -o json`, both ways: recomputed from the reports, and the
    aggregator's summary of the same matrix as published (`source` says which)."""
    from meshhealth.diagnosis.cluster_summary import summaries_of
    from meshhealth.diagnosis.diagnose import diagnose
    from meshhealth.diagnosis.findings import findings_json
    from meshhealth.diagnosis.view import matrix_view
    from meshhealth.documents.cluster_health import published_findings_document
    from meshhealth.documents.findings import RECOMPUTED, FindingsJSON

    built = matrix.build_matrix(matrix_stories.STORIES[story](), now=matrix_stories.NOW)
    found = diagnose(matrix_view(built))
    recomputed = findings_json(found, built.generated_at, built.maintenance, source=RECOMPUTED)
    assert_shape(recomputed, FindingsJSON)
    summaries = list(summaries_of(built, found).values())
    published = published_findings_document(summaries, matrix_stories.NOW)
    assert_shape(published, FindingsJSON)
    assert (recomputed["source"], published["source"]) == ("recomputed", "summary")
    assert published["findings"] == recomputed["findings"]  # one computation, two routes
