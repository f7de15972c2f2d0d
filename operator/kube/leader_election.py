"""Leader election on a ``coordination.k8s.io/v1`` Lease, as client-go's ``leaderelection``.

Replicas of the operator compete for one Lease (``sparkglass-operator`` in the operator's
namespace); only the holder acts, and it stops acting (the process exits) when it cannot
renew. All state of DataSamples and SparkApplications is in their status, so a new leader
continues every round where the old one stopped (operator/README.md, "Two replicas").
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import structlog

from ..timestamps import rfc3339
from .cluster import Cluster, Conflict, Kind, NotFound

log = structlog.get_logger(__name__)

LEASES = Kind("/apis/coordination.k8s.io/v1", "leases")


@dataclass(frozen=True)
class ElectionConfig:
    """Where the Lease is and the timing (seconds; client-go's defaults).

    Raises ``ValueError`` naming the field unless ``0 < retry_period < renew_deadline <
    lease_duration``."""

    namespace: str
    name: str = "sparkglass-operator"
    identity: str = ""
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError(
                "leader election timing is out of range: need 0 < retry period "
                f"({self.retry_period}) < renew deadline ({self.renew_deadline}) < lease "
                f"duration ({self.lease_duration})"
            )
        if not self.namespace:
            raise ValueError("leader election namespace is empty: give --lease-namespace")


def default_identity() -> str:
    """``$POD_NAME`` (the Downward API) or the host name, plus a random suffix so that a
    restarted process is a new candidate."""
    base = os.environ.get("POD_NAME") or socket.gethostname()
    return f"{base}_{uuid.uuid4().hex[:8]}"


class LeaderElector:
    """One candidate. ``await acquire()`` until leader, then ``await hold()`` while leader.

    The holder writes its identity and renews ``spec.renewTime`` every ``retry_period``
    seconds; the others look every ``retry_period`` seconds and take the Lease over once it
    has not changed for ``lease_duration`` seconds *by their own clock* (they time how long
    they have seen the same record, never compare the holder's timestamps with their own
    clock, so clock skew between nodes does not matter). The wait is the Lease's own
    ``leaseDurationSeconds`` when shorter (a released Lease says 1 s), never longer than
    ``lease_duration``: a record claiming decades that nobody renews is taken over like any
    other. Every write carries the ``resourceVersion`` read before it, so when two replicas
    try at once the API server accepts one write and answers 409 to the other.

    A leader that cannot renew for ``renew_deadline`` seconds (API server unreachable, or
    another replica holds the Lease) stops acting: :meth:`hold` returns, and the process
    exits so that nothing it started keeps running (Kubernetes restarts it as a candidate).
    A leader that stops cleanly releases the Lease (empty holder, 1 s duration) so the other
    takes over at its next look instead of after ``lease_duration``. Failover takes at most
    ``lease_duration + retry_period`` seconds after the leader's last renewal (defaults
    15 s + 2 s).
    """

    def __init__(
        self,
        cluster: Cluster,
        config: ElectionConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        # ``clock`` and ``sleep`` are parameters so a test can move time for this elector
        # alone: patching ``asyncio.sleep`` would also catch every other thread's sleeps.
        self.cluster, self.config, self._clock, self._sleep = cluster, config, clock, sleep
        self.identity = config.identity or default_identity()
        #: (holder, renewTime, resourceVersion) last seen, and when (our clock) it changed.
        self._seen: tuple[Any, Any] | None = None
        self._seen_at = 0.0
        self._last_renewal = 0.0
        self.is_leader = False

    async def acquire(self) -> None:
        """Return once this candidate holds the Lease (tries every ``retry_period``)."""
        log.info("leader election: waiting", lease=self.config.name, identity=self.identity)
        while True:
            try:
                if await self.try_acquire_or_renew():
                    break
            except Exception as exc:  # the API server's trouble: a candidate keeps trying
                log.warning("leader election: attempt failed", error=str(exc))
            await self._sleep(self.config.retry_period)
        log.info("leader election: leading", lease=self.config.name, identity=self.identity)

    async def hold(self) -> None:
        """Renew every ``retry_period``; return when leadership is lost (no successful renewal
        for ``renew_deadline`` seconds, or the Lease names another holder)."""
        while True:
            await self._sleep(self.config.retry_period)
            try:
                renewed = await self.try_acquire_or_renew()
            except Exception as exc:  # the API server's trouble: keep trying until the deadline
                log.warning("leader election: renewal failed", error=str(exc))
                renewed = False
            if not renewed and self._clock() - self._last_renewal >= self.config.renew_deadline:
                self.is_leader = False
                log.error(
                    "leader election: leadership lost",
                    lease=self.config.name,
                    identity=self.identity,
                )
                return

    async def release(self) -> None:
        """Give the Lease up if this candidate holds it (a clean stop); errors are logged."""
        if not self.is_leader:
            return
        self.is_leader = False
        try:
            lease = await self.cluster.get(LEASES, self.config.namespace, self.config.name)
            if (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            await self._patch(
                lease, {"holderIdentity": "", "leaseDurationSeconds": 1}, transitions=False
            )
            log.info("leader election: released", lease=self.config.name)
        except Exception as exc:
            log.warning("leader election: release failed", error=str(exc))

    async def try_acquire_or_renew(self) -> bool:
        """One attempt: create the Lease, renew ours, or take over an expired one. True when
        this candidate holds the Lease afterwards. Raises ``ApiError`` on API failures."""
        now = self._clock()
        ns, name = self.config.namespace, self.config.name
        try:
            lease = await self.cluster.get(LEASES, ns, name)
        except NotFound:
            return await self._create()
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        record = (holder, spec.get("renewTime"))
        if record != self._seen:
            self._seen, self._seen_at = record, now
        # At most our own duration: honouring a longer one written in the Lease let a single
        # write (holder "x", 2^31-1 seconds), never renewed, stall every replica for decades.
        # A shorter one (a clean release writes 1 s) is honoured.
        duration = min(
            float(spec.get("leaseDurationSeconds") or self.config.lease_duration),
            self.config.lease_duration,
        )
        if holder and holder != self.identity and now < self._seen_at + duration:
            self.is_leader = False
            return False  # held by another, and renewed within its duration as we saw it
        try:
            await self._patch(
                lease,
                {
                    "holderIdentity": self.identity,
                    "leaseDurationSeconds": round(self.config.lease_duration),
                    "renewTime": rfc3339(precision="microseconds"),
                },
                transitions=holder != self.identity,
            )
        except Conflict:
            return False  # another candidate wrote first
        self._last_renewal = now
        self.is_leader = True
        return True

    async def _create(self) -> bool:
        stamp = rfc3339(precision="microseconds")
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.config.name, "namespace": self.config.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": round(self.config.lease_duration),
                "acquireTime": stamp,
                "renewTime": stamp,
                "leaseTransitions": 0,
            },
        }
        try:
            await self.cluster.create(LEASES, self.config.namespace, body)
        except Conflict:
            return False
        self._last_renewal = self._clock()
        self.is_leader = True
        return True

    async def _patch(
        self, lease: dict[str, Any], spec: dict[str, Any], *, transitions: bool
    ) -> None:
        """Merge ``spec`` into the Lease, only if it is still the version read (409 if not)."""
        meta = lease.get("metadata") or {}
        if transitions and spec.get("holderIdentity"):
            old = lease.get("spec") or {}
            spec = {
                **spec,
                "acquireTime": spec.get("renewTime") or rfc3339(precision="microseconds"),
                "leaseTransitions": int(old.get("leaseTransitions") or 0) + 1,
            }
        await self.cluster.patch(
            LEASES,
            self.config.namespace,
            self.config.name,
            {"metadata": {"resourceVersion": meta.get("resourceVersion")}, "spec": spec},
        )
