"""How `meshhealth watch` draws its state (pure: state + clock in, rich renderables out).

    render_frame(state, now=time.time())      # the full-screen view (rich Group)
    frame_text(state, now=..., width=120)     # the same frame as plain text (--once)
    change_line(change)                       # one line per change (no terminal)

Every value from etcd or an agent (names, statuses, errors, findings, notes) goes
through meshhealth.terminal_text.escape before rich draws it.

rich draws the table and colours (and its Live display refreshes the screen): it is well
kept, pure Python, and much less code than curses of our own; textual would bring a
whole application framework for one table.

Cell colours: green OK; red the newest probe failed; yellow OK but lossy over the
window, or stale (not probed for longer than the matrix's staleness bound,
meshhealth.documents.matrix.stale_after_s); grey not probed yet.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from meshhealth.cli.format_events import timeline_line
from meshhealth.cli.format_findings import finding_lines
from meshhealth.cli.format_status import maintenance_lines, summary_verdict_text
from meshhealth.cli.watch_state import PATH_NAMES, Change, NodeView, PathView, WatchState
from meshhealth.diagnosis.timeline import latest
from meshhealth.documents.cluster_health import SOURCE_LOCAL, SOURCE_REPORTS, is_alone
from meshhealth.documents.events import events_document
from meshhealth.documents.matrix import stale_after_s
from meshhealth.model import ProbeStatus
from meshhealth.naming import natural_key
from meshhealth.terminal_text import escape
from meshhealth.timefmt import format_age_short, format_duration, iso_time

SPARK_CHARS = "▁▂▃▄▅▆▇█"
FAILED_POINT = "×"
SHORT_STATUS = {
    ProbeStatus.OK.value: "OK",
    ProbeStatus.TIMEOUT.value: "timeout",
    ProbeStatus.REFUSED.value: "refused",
    ProbeStatus.RESET.value: "reset",
    ProbeStatus.UNREACHABLE.value: "no route",
    ProbeStatus.HTTP_ERROR.value: "HTTP err",
    ProbeStatus.INVALID.value: "invalid",
    ProbeStatus.ERROR.value: "error",
    ProbeStatus.UNKNOWN.value: "-",
}
COLUMN_TITLES = {
    "node/icmp": "host ICMP",
    "node/http": "host HTTP",
    "endpoint/icmp": "endpoint ICMP",
    "endpoint/http": "endpoint HTTP",
}
MATRIX_SYMBOL = {
    "reachable": "●",
    "suspect": "◐",
    "unreachable": "✗",
    "stale": "?",
    "unassigned": "-",
    "unknown": "·",
}
MATRIX_COLOUR = {
    "reachable": "green",
    "suspect": "yellow",
    "unreachable": "red",
    "stale": "yellow",
    "unassigned": "grey50",
    "unknown": "grey50",
}
STATE_COLOUR = {
    "reachable": "green",
    "suspect": "yellow",
    "unreachable": "red",
    "unknown": "grey50",
}
STATE_MARK = {"reachable": "● ", "suspect": "◐ ", "unreachable": "✗ "}


def iso(unix_s: float | None) -> str:
    """The time stamp, `-` when unknown."""
    return iso_time(unix_s) or "-"


def ago(now: float, unix_s: float | None) -> str:
    """How long before `now` (`3s`, `2m`, `1h`: the text adds "ago"), `-` when unknown."""
    return "-" if unix_s is None else format_age_short(now - unix_s)


def sparkline(points: Sequence[float | None]) -> str:
    """One character per RTT, scaled between the smallest and the largest; × = failed."""
    values = [p for p in points if p is not None]
    low, high = (min(values), max(values)) if values else (0.0, 0.0)
    chars = []
    for point in points:
        if point is None:
            chars.append(FAILED_POINT)
        elif high <= low:
            chars.append(SPARK_CHARS[len(SPARK_CHARS) // 2])
        else:
            index = round((point - low) / (high - low) * (len(SPARK_CHARS) - 1))
            chars.append(SPARK_CHARS[index])
    return "".join(chars)


def path_colour(path: PathView | None, *, now: float, interval_s: float | None) -> str:
    if path is None or path.status == ProbeStatus.UNKNOWN.value:
        return "grey50"
    if path.state == "suspect":
        return "yellow"  # failing, not for long enough to call it unreachable
    if path.status != ProbeStatus.OK.value:
        return "red"
    # the same bound as a stale report in the matrix
    bound_s = stale_after_s(interval_s) if interval_s else 0.0
    if bound_s and path.last_probed is not None and now - path.last_probed > bound_s:
        return "yellow"
    if path.loss > 0:
        return "yellow"
    return "green"


def path_cell(path: PathView | None, *, now: float, interval_s: float | None) -> Text:
    """Two lines in the path's colour: `OK 412µs 0%`, then the RTT sparkline."""
    colour = path_colour(path, now=now, interval_s=interval_s)
    if path is None:
        return Text("-", style=colour)
    shown = path.rtt_s if path.status == ProbeStatus.OK.value else None  # not others' RTT
    rtt = format_duration(shown) if shown is not None else "-"
    loss = f"{path.loss * 100:.0f}%"
    status = SHORT_STATUS.get(path.status, escape(path.status))  # a peer's word
    text = Text(f"{status} {rtt} {loss}", style=f"bold {colour}")
    text.append("\n" + (sparkline(list(path.history)) or " "), style=colour)
    return text


def _node_label(node: NodeView) -> Text:
    colour = STATE_COLOUR.get(node.state, "grey50")
    label = Text(STATE_MARK.get(node.state, "· "))
    label.stylize(colour)
    label.append(escape(node.name) + (" (local)" if node.is_local else ""))
    return label


def header(state: WatchState, *, now: float, width: int) -> Text:
    reachable, total = state.health
    text = Text()
    text.append("meshhealth watch ", style="bold")
    text.append(f"{escape(state.source)}  ")
    if state.connection == "connected":
        text.append("connected", style="green")
    elif state.connection == "connecting":
        text.append("connecting…", style="yellow")
    else:
        detail = f" ({escape(state.connection_detail)})" if state.connection_detail else ""
        text.append(f"disconnected, retrying…{detail}", style="bold red")
    verdicts = [v for v in state.cluster_health if v["source"] != SOURCE_LOCAL]
    # One label, one meaning (as in `status`): `Cluster health` is the cluster's verdict
    # when there is one; this node's own probes are then its `Direct targets`.
    own = "Direct targets: " if verdicts or state.subset_plan else "Cluster health: "
    from_reports = any(v["source"] == SOURCE_REPORTS for v in verdicts)
    if not from_reports:  # --etcd: no node of its own
        text.append(f"\n{own}")
        text.append(
            f"{reachable}/{total} reachable", style="green" if reachable == total else "red"
        )
    text.append("   etcd: ")
    if state.etcd_up is None:
        text.append("?", style="grey50")
    elif state.etcd_up:
        text.append("up", style="green")
    else:
        text.append(f"down ({escape(state.etcd_error or 'no answer')})", style="red")
    text.append(f"   probe time: {iso(state.probe_time)} ({ago(now, state.probe_time)} ago)")
    if state.last_update is not None and state.connection == "connected":
        text.append(f"   last update {ago(now, state.last_update)} ago")
    if state.invalid_values:
        count = state.invalid_values
        text.append(
            f"   {count} invalid entr{'y' if count == 1 else 'ies'} skipped", style="yellow"
        )
    local = next((cluster for (cluster, _), n in state.nodes.items() if n.is_local), None)
    for verdict in verdicts:
        good = verdict["reachable"] == verdict["total"] and not is_alone(verdict)
        named = len(verdicts) > 1 and verdict["cluster"] != local
        label = f"Cluster health {escape(verdict['cluster'])}" if named else "Cluster health"
        text.append(f"\n{label}: ")
        text.append(escape(summary_verdict_text(verdict, now)), style="green" if good else "red")
        for line in maintenance_lines(verdict):
            text.append(f"\n{escape(line.strip())}", style="yellow")
    for finding in state.findings:  # the banner: whose fault it is, wrapped at words
        style = "yellow" if finding.get("expected") else "bold red"
        for line in finding_lines(finding, width):
            text.append(f"\n{line}", style=style)
    if state.note:
        text.append(f"\n{escape(state.note)}", style="yellow")
    return text


def list_view(state: WatchState, *, now: float) -> list[RenderableType]:
    tables: list[RenderableType] = []
    clusters = sorted({cluster for cluster, _ in state.nodes}, key=natural_key)
    for cluster in clusters:
        table = Table(
            title=f"cluster {escape(cluster)}", title_justify="left", expand=False, box=None
        )
        table.add_column("node", no_wrap=True)
        for name in PATH_NAMES:
            table.add_column(COLUMN_TITLES[name], no_wrap=True)
        table.add_column("probed", justify="right", no_wrap=True)
        nodes = sorted(
            (n for (c, _), n in state.nodes.items() if c == cluster),
            key=lambda n: (not n.is_local, natural_key(n.name)),
        )
        for node in nodes:
            probed = [p.last_probed for p in node.paths.values() if p.last_probed is not None]
            table.add_row(
                _node_label(node),
                *(
                    path_cell(node.paths.get(name), now=now, interval_s=state.probe_interval_s)
                    for name in PATH_NAMES
                ),
                ago(now, max(probed)) if probed else "-",
            )
        tables.append(table)
    if not tables:
        tables.append(Text("no nodes yet", style="grey50"))
    return tables


def matrix_view(state: WatchState) -> list[RenderableType]:
    """Rows: source nodes (who probes); columns: targets (the matrix document of
    meshhealth.documents.matrix, from the agent or built from etcd)."""
    matrix = state.matrix
    if matrix is None:
        note = state.matrix_note or "matrix: loading…"
        return [Text(f"{escape(note)}; press m for the list", style="yellow")]
    title = Text("matrix: each row is what that node sees of each column", style="bold")
    table = Table(box=None)
    table.add_column("source", no_wrap=True)
    for node in matrix["nodes"]:
        table.add_column(escape(node["name"]), justify="center", no_wrap=True)
    for row in matrix["rows"]:
        label = escape(row["name"]) + (" (stale)" if row["stale"] else "")
        cells = [
            Text(
                MATRIX_SYMBOL.get(cell["state"], "?"),
                style=MATRIX_COLOUR.get(cell["state"], "grey50"),
            )
            for cell in row["cells"]
        ]
        table.add_row(label, *cells)
    # Warnings in yellow; notes (the coverage line while every node has its k
    # observers; absent from an older agent's document) plain grey.
    notes = set(matrix["summary"].get("notes", ()))
    lines = [
        Text(escape(line), style="grey50" if line in notes else "yellow")
        for line in matrix["summary"]["lines"]
    ]
    legend = Text(
        "● reachable  ◐ suspect  ✗ unreachable  ? stale report  · unknown  "
        "- not assigned this epoch",
        style="grey50",
    )
    return [title, table, legend, *lines]


RECENT_EVENTS = 5  # the findings timeline's last events under the view


def recent_events(state: WatchState, *, now: float) -> list[RenderableType]:
    """`Recent events:` and one line per event, the latest change last (none: nothing)."""
    if not state.events:
        return []
    doc = events_document(latest(state.events.values(), RECENT_EVENTS), now=now, since=None)
    lines = [
        Text(timeline_line(e), style="red" if e["closed_at"] is None else "grey50")
        for e in doc["events"]
    ]
    return [Text(""), Text("Recent events (meshhealth events):", style="bold"), *lines]


def render_frame(state: WatchState, *, now: float, width: int) -> RenderableType:
    """The whole view for a screen `width` columns wide."""
    body = matrix_view(state) if state.mode == "matrix" else list_view(state, now=now)
    keys = Text("q quit   m list/matrix", style="grey50")
    events = recent_events(state, now=now)
    return Group(header(state, now=now, width=width), Text(""), *body, *events, Text(""), keys)


def frame_text(state: WatchState, *, now: float, width: int = 120) -> str:
    """The frame as plain text (no colour codes), as `--once` prints it."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, color_system=None, force_terminal=False)
    console.print(render_frame(state, now=now, width=width))
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines()) + "\n"


def change_line(change: Change) -> str:
    """`2026-11-23T10:00:01Z lab1/node2 endpoint/http OK -> Connection timed out`."""
    if change.old is None:
        return escape(f"{iso(change.at)} {change.node} {change.path} {change.new}")
    return escape(f"{iso(change.at)} {change.node} {change.path} {change.old} -> {change.new}")


def event_line(now: float, text: str) -> str:
    """A line about the viewer itself (connected, disconnected) in the plain output."""
    return f"{iso(now)} {escape(text)}"
