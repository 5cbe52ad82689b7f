"""A planned maintenance window (`state/maintenance/v1/<cluster>/<node>`, under the
window's own lease): while it lasts, the node's findings are expected and the cluster's
verdict and alerts leave it out (docs/operations.md "Planned maintenance").

On the wire: `cluster`, `node`, `start` and `end` (unix seconds; the window is over at
`end`, whatever etcd still holds), `reason` (may be empty) and `by` (who set it). The
lease only cleans up: etcd deletes the key a little after `end`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from meshhealth import defaults
from meshhealth.wire import fields as f
from meshhealth.wire.envelope import Codec
from meshhealth.wire.fields import DecodeError, Field


@dataclass(frozen=True, slots=True)
class MaintenanceWindow:
    """`node` of `cluster` is in planned maintenance from `start` until `end` (unix s)."""

    cluster: str
    node: str
    start: float
    end: float
    reason: str = ""
    by: str = ""

    def active_at(self, now: float) -> bool:
        """The window is on at `now` (from the reader's clock: only its end counts, so a
        writer's clock a little ahead does not delay it)."""
        return now < self.end


def _check(window: MaintenanceWindow) -> MaintenanceWindow:
    if window.end <= window.start:
        raise DecodeError("field 'end': must be after 'start'")
    if window.end - window.start > defaults.MAINTENANCE_MAX_S:
        raise DecodeError(
            f"field 'end': the window is longer than the longest allowed "
            f"({defaults.MAINTENANCE_MAX_S:g}s)"
        )
    return window


FIELDS = (
    Field("cluster", f.cluster_name),
    Field("node", f.node_name),
    f.time_field("start"),
    f.time_field("end"),
    Field("reason", f.text(defaults.MAINTENANCE_REASON_MAX_CHARS, allow_empty=True), default=""),
    Field("by", f.text(allow_empty=True), default=""),
)
MAINTENANCE = Codec.of("maintenance window", MaintenanceWindow, FIELDS, _check)
encode_maintenance, decode_maintenance = MAINTENANCE.encode, MAINTENANCE.decode


def active_windows(
    windows: Iterable[MaintenanceWindow], now: float
) -> dict[str, MaintenanceWindow]:
    """ "cluster/node" -> its window, of the `windows` on at `now`, sorted."""
    on = sorted((w for w in windows if w.active_at(now)), key=lambda w: (w.cluster, w.node))
    return {f"{w.cluster}/{w.node}": w for w in on}
