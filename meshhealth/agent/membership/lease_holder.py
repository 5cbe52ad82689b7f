"""What the registrar offers to those who write under this node's lease.

The publisher (this node's health report) and the aggregator election (the claim key)
both write under the registrar's lease and must act again when it changes: a new lease
after a lost one, or a re-registration. `Registrar` is the implementation; tests pass
small fakes with a real etcd lease.
"""

from __future__ import annotations

from typing import Protocol


class LeaseHolder(Protocol):
    """The node's lease, and word when it or the registration changes."""

    @property
    def lease_id(self) -> int | None: ...

    @property
    def changes(self) -> int:
        """Moves whenever `lease_id` changes or the node registers again."""
        ...

    async def wait_changed(self, seen: int) -> int:
        """Return the new `changes` once it differs from `seen`."""
        ...
