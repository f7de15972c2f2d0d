"""Whether each registered application's driver still answers (local mode).

The application listings ask :class:`DriverLiveness`; a vertex's poll never does. A driver
restarted at the same address refuses the old token, so a probe tells a gone run from a live
one; what a probe found is kept for a short while and, when the driver answered, written to
the store so that a service started later can say when a gone driver was last seen.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass
from enum import StrEnum

from sqlalchemy.orm import Session, sessionmaker

from sparkglass.runtime.control.client import ControlClient, ControlError, ControlTLS

from .driver_trust import DriverTrust, driver_location
from .store import repository
from .store.orm import Application

log = logging.getLogger(__name__)


class DriverState(StrEnum):
    """Whether an application's driver answers (local mode)."""

    LIVE = "live"
    """It answered within the last probe's timeout (or was registered just now)."""
    ENDED = "ended"
    """It did not answer the last probe: nothing listens there any more, it refused the
    stored token (another driver took its address), or it timed out."""
    UNKNOWN = "unknown"
    """Not known: not probed yet, a probe still under way, no driver (Kubernetes mode), or
    a token the store key cannot open."""


@dataclass(frozen=True)
class DriverStatus:
    """What the service knows of an application's driver."""

    state: DriverState
    #: When the driver last answered (ms since the epoch), if ever.
    last_seen_at: int | None = None


@dataclass(frozen=True)
class _Target:
    """The driver of one application's run, as a probe needs it (no ORM row: probes run
    on their own threads, after the listing's session closed)."""

    id: int
    namespace: str
    name: str
    run: int
    driver_url: str


@dataclass
class _Probe:
    """The last probe of one application's driver (run and URL: which driver it was)."""

    run: int
    driver_url: str
    state: DriverState
    checked_at: float  # monotonic s
    checked_ms: int  # the same, ms since the epoch (compared with the store's times)
    seen_at: int | None  # ms since the epoch


#: How long a probe's answer stands, s: an application listing probes a driver at most once
#: per this (per service replica).
LIVENESS_TTL_S = 10.0
#: A driver that does not answer a probe within this (connect, read), s, is marked ended.
PROBE_TIMEOUT_S = 2.0
#: The longest a listing waits for the probes it started, s; a driver still unanswered
#: then is listed ``unknown`` (its probe goes on, for the next listing).
LISTING_WAIT_S = 2.5
#: Probes running at once (each one short request).
PROBE_WORKERS = 4
#: A driver's ``driver_seen_at`` in the store is written at most this often, ms.
SEEN_WRITE_INTERVAL_MS = 60_000


class DriverLiveness:
    """Local mode: whether each registered application's driver still answers.

    Asked by the application listings only, never by a poll of a vertex: a driver is
    probed (``GET /api/v1/settings`` with its token: a driver restarted at the same address
    refuses the old token) when its last answer is older than ``ttl_s``, by at most
    ``workers`` threads, one probe per application at a time, each bounded by
    ``probe_timeout_s``; a listing waits at most ``wait_s`` for them. What a probe found is
    kept for ``ttl_s`` (at most ``max_entries`` applications, least recently asked
    forgotten first); when a driver answered is also written to the store
    (``applications.driver_seen_at``), so that a service started later can say when a
    gone driver was last seen.
    """

    def __init__(
        self,
        sessions: sessionmaker[Session],
        *,
        ttl_s: float = LIVENESS_TTL_S,
        probe_timeout_s: float = PROBE_TIMEOUT_S,
        wait_s: float = LISTING_WAIT_S,
        workers: int = PROBE_WORKERS,
        max_entries: int = 10_000,
    ) -> None:
        for field_name, value in (
            ("ttl_s", ttl_s),
            ("probe_timeout_s", probe_timeout_s),
            ("wait_s", wait_s),
        ):
            if not value > 0:
                raise ValueError(f"{field_name}: expected seconds > 0, got {value!r}")
        if workers < 1 or max_entries < 1:
            raise ValueError(
                f"workers and max_entries: expected at least 1, got {workers}, {max_entries}"
            )
        self._sessions = sessions
        self._ttl = ttl_s
        self._probe_timeout = probe_timeout_s
        self._wait = wait_s
        self._workers = workers
        self._max_entries = max_entries
        self._probes: OrderedDict[int, _Probe] = OrderedDict()
        self._inflight: dict[int, Future[None]] = {}
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None  # made at the first probe
        self._closed = False

    def known(self, app: Application) -> DriverStatus:
        """What is known of ``app``'s driver now, without probing it."""
        stored = app.driver_seen_at  # the store's: a registration, or any replica's probe
        if not app.driver_url:
            return DriverStatus(DriverState.UNKNOWN, stored)
        with self._lock:
            probe = self._probes.get(app.id)
        if probe is None or (probe.run, probe.driver_url) != (app.run, app.driver_url):
            probe = None  # of another driver: says nothing of this one
        if stored is not None and (probe is None or stored > probe.checked_ms):
            # Answered after this replica's last probe (or none): live while that is recent.
            recent = repository.now_ms() - stored < self._ttl * 1000
            if recent or probe is None:
                return DriverStatus(DriverState.LIVE if recent else DriverState.UNKNOWN, stored)
        if probe is None:
            return DriverStatus(DriverState.UNKNOWN, stored)
        seen = [t for t in (probe.seen_at, stored) if t is not None]
        return DriverStatus(probe.state, max(seen) if seen else None)

    def statuses(
        self, apps: Iterable[Application], trust: DriverTrust | None = None
    ) -> dict[int, DriverStatus]:
        """The driver status of each of ``apps`` (by application id), probing those not
        known within ``ttl_s`` and waiting up to ``wait_s`` for their answers.
        ``trust``: the certificates pinned for ``https://`` drivers."""
        apps = list(apps)
        now = time.monotonic()
        stale = [app for app in apps if app.driver_url and not self._fresh(app, now)]
        waiting: list[Future[None]] = []
        if stale:
            # Everything a probe needs is read here: the rows stay with the caller's session.
            with self._sessions() as session:  # the tokens are stored encrypted
                for app in stale:
                    target = _Target(app.id, app.namespace, app.name, app.run, app.driver_url or "")
                    try:
                        token = repository.driver_token(session, app) or ""
                    except ValueError:  # the store key cannot open it: nothing to ask with
                        self._note(target, DriverState.UNKNOWN, None)
                        continue
                    tls = trust.get(app.namespace, app.name) if trust is not None else None
                    future = self._start_probe(target, token, tls, app.driver_seen_at)
                    if future is not None:
                        waiting.append(future)
        if waiting:
            wait_futures(waiting, timeout=self._wait)
        return {app.id: self.known(app) for app in apps}

    def _fresh(self, app: Application, now: float) -> bool:
        """Whether what is known of ``app``'s driver needs no probe."""
        seen_at = app.driver_seen_at
        if seen_at is not None and repository.now_ms() - seen_at < self._ttl * 1000:
            return True
        with self._lock:
            probe = self._probes.get(app.id)
            if probe is not None:
                self._probes.move_to_end(app.id)
        return (
            probe is not None
            and (probe.run, probe.driver_url) == (app.run, app.driver_url)
            and now - probe.checked_at < self._ttl
        )

    def _start_probe(
        self, target: _Target, token: str, tls: ControlTLS | None, stored_seen: int | None
    ) -> Future[None] | None:
        """The probe of ``target``'s driver under way, started now if none is (one per
        application at a time); ``None`` once closed."""
        with self._lock:
            if self._closed:
                return None
            running = self._inflight.get(target.id)
            if running is not None:
                return running
            if self._pool is None:
                self._pool = ThreadPoolExecutor(
                    max_workers=self._workers, thread_name_prefix="sparkglass-liveness"
                )
            future = self._pool.submit(self._probe, target, token, tls, stored_seen)
            self._inflight[target.id] = future
        future.add_done_callback(lambda _: self._done(target.id))
        return future

    def _done(self, application_id: int) -> None:
        with self._lock:
            self._inflight.pop(application_id, None)

    def _probe(
        self, target: _Target, token: str, tls: ControlTLS | None, stored_seen: int | None
    ) -> None:
        """Ask ``target``'s driver for its settings; note what happened."""
        try:
            with ControlClient(
                target.driver_url, token, timeout_s=self._probe_timeout, tls=tls
            ) as driver:
                driver.settings()
        except ControlError as exc:
            log.info(
                "application %s/%s: its driver at %s did not answer a probe (%s, HTTP %s)",
                target.namespace,
                target.name,
                driver_location(target.driver_url),
                type(exc).__name__,
                exc.status,
            )
            self._note(target, DriverState.ENDED, None)
            return
        except ValueError:  # a certificate pinned for a URL that is not https://
            self._note(target, DriverState.UNKNOWN, None)
            return
        seen_at = repository.now_ms()
        if (stored_seen or 0) + SEEN_WRITE_INTERVAL_MS <= seen_at:
            try:
                with self._sessions.begin() as session:
                    repository.mark_driver_seen(session, target.id, target.run, seen_at)
            except Exception:  # the listing answers from memory all the same
                log.exception(
                    "noting that the driver of %s/%s answered", target.namespace, target.name
                )
        self._note(target, DriverState.LIVE, seen_at)

    def _note(self, target: _Target, state: DriverState, seen_at: int | None) -> None:
        """Keep what a probe of ``target`` found (when it last answered: ``seen_at``, or
        the previous probe's of the same run)."""
        with self._lock:
            before = self._probes.get(target.id)
            if seen_at is None and before is not None and before.run == target.run:
                seen_at = before.seen_at
            self._probes[target.id] = _Probe(
                target.run,
                target.driver_url,
                state,
                time.monotonic(),
                repository.now_ms(),
                seen_at,
            )
            self._probes.move_to_end(target.id)
            while len(self._probes) > self._max_entries:
                self._probes.popitem(last=False)

    def forget(self, application_id: int) -> None:
        """Drop what is known of an application (deleted, or registered with a driver)."""
        with self._lock:
            self._probes.pop(application_id, None)

    def close(self) -> None:
        """Start no more probes; those under way end within their timeout."""
        with self._lock:
            self._closed = True
            pool = self._pool
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
