"""What every handler shares in one operator process (kopf's ``memo``)."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import dataclass, field

from .cluster import Cluster
from .results import ResultStore
from .settings import OperatorConfig


@dataclass
class OperatorContext:
    """The configuration, the API client, the result store (if configured), and one lock
    per object so that a timer, a change handler and a Pod event never reconcile the same
    object at once within this process (peering keeps other processes out)."""

    config: OperatorConfig
    cluster: Cluster
    store: ResultStore | None = None
    _locks: dict[tuple[str, str, str], asyncio.Lock] = field(
        default_factory=lambda: defaultdict(asyncio.Lock)
    )

    def lock(self, kind: str, namespace: str, name: str) -> asyncio.Lock:
        """The lock of one object (created on first use)."""
        return self._locks[(kind, namespace, name)]

    def forget(self, kind: str, namespace: str, name: str) -> None:
        """Drop the lock of a deleted object."""
        self._locks.pop((kind, namespace, name), None)
