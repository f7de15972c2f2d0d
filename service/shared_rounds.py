"""The lazy trigger + polling rule of the data-sample endpoint, and the shared-round rule.

One poll of ``GET .../data-sample`` (docs/architecture.md, "Lazy trigger and polling"):

1. a result that ended less than ``refresh_interval`` ago is answered as is;
2. otherwise, if no round runs, the caller (when allowed to trigger) tries to *claim* the
   (application, vertex, request) lease in the database; the one winner per interval inserts a
   ``PENDING`` round row and runs the round on a worker thread;
3. while a round runs, callers get the previous result with ``stale=true``, or ``PENDING``
   when there is none. That answer is reused from memory for ``INTERIM_ANSWER_S``: 200 open
   pages polling through a round would otherwise each read the store (3.5 ms of service CPU
   per poll against 0.7 ms for a fresh result, measured with a sequential client), and a
   service that falls behind at every round turns 304s into full bodies and collapses.

A request is a plain round or one with a kind, filter, columns or expectation
(:class:`~sparkglass.runtime.contract.round_request.RoundRequest`): each request has its own
rounds, lease and answers, and every one is stored and shared across replicas alike.

Claims go through the database (:func:`~sparkglass.service.store.repository.claim_round`),
so the rule holds across threads, processes and service replicas sharing one store.

One run is one run: only rounds of the application's current run (``Application.run``, one
more each time it is registered with another driver) answer a poll, fresh or stale. A round
of an earlier run came from a driver that is gone; it stays in the round history.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from sqlalchemy.orm import Session, sessionmaker

from sparkglass.runtime.contract.result_caps import ResultRejected
from sparkglass.runtime.contract.round_request import PLAIN
from sparkglass.runtime.contract.round_request import RoundRequest as Narrowing
from sparkglass.runtime.contract.sample_result import (
    DataSampleResult,
    ErrorCode,
    NoDataReason,
    SampleStatus,
    SubtaskSamples,
)
from sparkglass.runtime.contract.sampling_settings import (
    RANGES,
    SamplingSettingsError,
    client_deadline_ms,
    settings_from_spec,
)

from .driver_liveness import DriverLiveness
from .execution.base import RoundExecutor, RoundRequest, failed
from .metrics import ServiceMetrics
from .result_body import ResultBodies, StreamGate
from .settings import Settings
from .store import repository
from .store.orm import Application, Round

log = logging.getLogger(__name__)

#: How long an answer given while a round runs (the previous result with ``stale=true``, or
#: ``PENDING``) is reused without reading the store, s. The replica running the round drops
#: it as soon as the round ends; another replica or worker shows the new result up to this
#: much later.
INTERIM_ANSWER_S = 0.5


@dataclass(frozen=True)
class RoundPolicy:
    """One application's refresh interval (ms), how long the service waits for a round (s),
    and the longest record its driver may send (characters)."""

    refresh_ms: int
    deadline_s: float
    max_record_length: int = 10_000


def _found_query_idle(row: Round) -> bool:
    """A ``NO_DATA`` round that saw no micro-batch: it answers only until the next round."""
    return row.no_data_reason == NoDataReason.NO_MICRO_BATCH.value


class TriggerForbiddenError(Exception):
    """A round would have to start, and the caller may only read."""


class TooManyRoundsError(Exception):
    """A narrowed round would have to start, and no narrowed-round slot is free on this
    replica: the application runs ``narrowed_rounds_per_application`` of them, or all
    applications together run ``narrowed_rounds_per_replica``. ``setting`` names the cap."""

    def __init__(self, limit: int, setting: str) -> None:
        whom = "this application" if setting.endswith("application") else "this replica"
        super().__init__(
            f"{whom} already runs {limit} rounds with a kind, filter, columns or expectation "
            f"({setting}); retry when one ended"
        )
        self.limit = limit
        self.setting = setting


#: How often (s) the per-request end counters of requests nobody polls now are dropped.
ENDED_SWEEP_S = 60.0


@dataclass(frozen=True)
class PollAnswer:
    """What one poll produced: the head of the unfiltered result (its ``samples`` empty:
    records are sent from the store by :class:`~.result_body.ResultBodies`) and the round
    this poll started, if it did."""

    result: DataSampleResult
    started_round: str | None


#: The key of one request's answers in memory: (application id, the application's kind,
#: vertex, request key).
AnswerKey = tuple[int, str, str, str]


def answer_key(app: Application, vertex: str, request_key: str) -> AnswerKey:
    """Where the answers to ``request_key`` of ``app``'s ``vertex`` are kept. The kind is part
    of it: an id names a row, and a row of another kind under the same name (the catalog
    replaced the application) must never be served this one's answers, even where the
    store gives a new row a deleted one's id."""
    return (app.id, app.api_version or "", vertex, request_key)


class SharedRounds:
    """Answers polls and runs rounds (one per (application, vertex, request) per refresh
    interval)."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        executor: RoundExecutor,
        settings: Settings,
        metrics: ServiceMetrics,
    ) -> None:
        self._sessions = sessions
        self._executor = executor
        self._settings = settings
        self._metrics = metrics
        self._pool = ThreadPoolExecutor(
            max_workers=settings.round_workers, thread_name_prefix="sparkglass-round"
        )
        #: AnswerKey -> (expires at ms, head of the fresh result, the run it
        #: is of): a few hundred bytes per vertex; records are never held here. The run:
        #: an application registered with another driver through another replica shows here
        #: as an application row of a later run, which no answer of the earlier one serves.
        self._fresh: dict[AnswerKey, tuple[int, DataSampleResult, int]] = {}
        #: AnswerKey -> (expires at, monotonic s; the answer while a round
        #: runs; the run it is of): as small as ``_fresh``.
        self._interim: dict[AnswerKey, tuple[float, DataSampleResult, int]] = {}
        #: AnswerKey -> rounds of it this replica saw end: a poll that read
        #: the store before a round ended must not keep its stale answer after.
        self._rounds_ended: dict[AnswerKey, int] = {}
        self._ended_swept_at = time.monotonic()
        #: Application id -> narrowed rounds it runs on this replica now (reserved before the
        #: claim, so two polls cannot both pass the cap).
        self._narrowed_running: dict[int, int] = {}
        #: Bumped by forget(): a poll that read the store before an application was
        #: forgotten keeps nothing of it (SQLite may give a new application the same id).
        self._forgotten = 0
        self._cache_lock = threading.Lock()
        self._futures: set[Future[None]] = set()
        #: Bounds the full results (up to ~50 MB each) being fetched and saved, and the
        #: bodies being built for the cache, at once; bodies sent from the store or the
        #: cache need no pass.
        self._memory_gate = threading.BoundedSemaphore(settings.result_concurrency)
        #: Bodies of stored rounds, cached within result_cache_bytes; at most
        #: stream_concurrency written from the store at once.
        self.bodies = ResultBodies(
            sessions,
            settings.result_cache_bytes,
            self._memory_gate,
            StreamGate(settings.stream_concurrency),
            settings.stream_wait_seconds,
            gzip_min_bytes=settings.gzip_min_bytes,
        )
        streams = self.bodies.streams
        metrics.result_streams_in_use.set_function(lambda: streams.in_use)
        metrics.result_streams_waiting.set_function(lambda: streams.waiting)
        #: Whether each application's driver still answers (asked by listings, never by a
        #: poll): kept here, with the rounds, as one per service instance.
        self.drivers = DriverLiveness(sessions)

    @property
    def memory_gate(self) -> threading.BoundedSemaphore:
        """Held while a full result is brought into memory (``result_concurrency`` passes)."""
        return self._memory_gate

    def policy(self, app: Application) -> RoundPolicy:
        """The application's own refresh interval and round deadline.

        They come from its sampling settings (the driver's ``spark.sparkglass.sampling.*`` in
        local mode, ``spec.sampling`` of its SparkApplication in Kubernetes mode), so REST, the
        page and the CLI refresh alike; the service's ``refresh_interval_seconds`` and
        ``round_timeout_seconds`` only stand in for a setting the application does not state.
        """
        refresh_ms = int(self._settings.refresh_interval_seconds * 1000)
        timeout_ms = int(self._settings.round_timeout_seconds * 1000)
        max_record_length = RANGES["max_record_length"].high  # unreadable settings: the cap
        try:
            own = settings_from_spec(app.sampling or {})
        except SamplingSettingsError as exc:
            log.warning("application %s/%s: %s", app.namespace, app.name, exc)
        else:
            if "refresh_interval_ms" in own.model_fields_set:
                refresh_ms = own.refresh_interval_ms
            if "timeout_ms" in own.model_fields_set:
                timeout_ms = own.timeout_ms
            max_record_length = own.max_record_length
        grace_ms = int(self._settings.round_grace_seconds * 1000)
        return RoundPolicy(
            refresh_ms, client_deadline_ms(timeout_ms, grace_ms) / 1000, max_record_length
        )

    def fresh_answer(
        self, app: Application, vertex: str, narrowing: Narrowing = PLAIN
    ) -> PollAnswer | None:
        """The answer from memory when this replica holds one, else ``None``.

        A fresh result stays the answer until it expires: no replica can start a new round
        before then (the lease outlives it), so no database read is needed. While a round
        runs, the answer given then (stale or ``PENDING``) is reused for
        ``INTERIM_ANSWER_S``. Never blocks, so the route calls it on the event loop.
        """
        key = answer_key(app, vertex, narrowing.key())
        with self._cache_lock:
            fresh = self._fresh.get(key)
            interim = self._interim.get(key)
        if fresh is not None and repository.now_ms() < fresh[0] and fresh[2] == app.run:
            return PollAnswer(fresh[1], None)
        if interim is not None and time.monotonic() < interim[0] and interim[2] == app.run:
            return PollAnswer(interim[1], None)
        return None

    def poll(
        self,
        app: Application,
        vertex: str,
        *,
        actor: str,
        may_trigger: Callable[[], bool],
        narrowing: Narrowing = PLAIN,
    ) -> PollAnswer:
        """One poll of ``vertex`` of ``app`` for ``narrowing`` (see the module docstring).

        ``may_trigger`` is asked only when a round would start (in Kubernetes mode it costs
        a SubjectAccessReview). Raises :class:`TriggerForbiddenError` when no result exists,
        none is running, and the caller may not trigger.
        """
        can_trigger = False
        t = repository.now_ms()
        policy = self.policy(app)
        request_key = narrowing.key()
        fresh_key = answer_key(app, vertex, request_key)
        cached = self.fresh_answer(app, vertex, narrowing)
        if cached is not None:
            return cached
        with self._cache_lock:
            self._prune(t, time.monotonic())
            seen = (self._rounds_ended.get(fresh_key, 0), self._forgotten)
        # The interim answer lasts from before the store read: a poll that waited long for
        # the store (a loaded replica) must not keep a stale answer past INTERIM_ANSWER_S.
        read_at = time.monotonic()
        started: Round | None = None
        abandoned_before = t - int(policy.deadline_s * 1000) - 5000
        with self._sessions.begin() as session:
            # Each read sees its own snapshot (SQLite's driver opens no transaction for a
            # read, PostgreSQL reads committed), so a round may end between them. The
            # running round first: one that ends meanwhile is then found finished, never
            # missed by both reads (which would refuse a viewer as if none had run).
            running = repository.running_round(
                session,
                app.id,
                vertex,
                started_after=abandoned_before,
                run=app.run,
                request_key=request_key,
            )
            latest = repository.latest_finished_round(
                session, app.id, vertex, run=app.run, request_key=request_key
            )
            if (
                latest is not None
                and t - (latest.end_timestamp or 0) < policy.refresh_ms
                and not _found_query_idle(latest)
            ):
                result = repository.round_head(latest)
                with self._cache_lock:
                    if self._forgotten == seen[1]:
                        expires = (latest.end_timestamp or 0) + policy.refresh_ms
                        self._fresh[fresh_key] = (expires, result, app.run)
                return PollAnswer(result, None)
            latest_result = repository.round_head(latest) if latest is not None else None
        if running is None:
            # No slot free and an older result to show: the caller gets it stale, as a
            # viewer would, without the cost of asking whether it may trigger.
            full = self.slot_problem(app.id, narrowing) is not None
            # Asked with no transaction open: in Kubernetes mode it is a SubjectAccessReview
            # (an HTTP call of up to seconds), and an open transaction would hold a pooled
            # connection, and a snapshot or lock, for as long.
            can_trigger = False if full and latest_result is not None else may_trigger()
        if running is None and can_trigger:
            try:
                self._reserve(app.id, narrowing)
            except TooManyRoundsError:
                if latest_result is None:
                    raise
                can_trigger = False  # taken meanwhile: the older result, stale
            else:
                rid = secrets.token_hex(8)
                try:
                    started, running = self._claim(
                        app, vertex, rid, actor, t, policy, request_key, abandoned_before
                    )
                finally:
                    if started is None:
                        self._release(app.id, narrowing)
        if running is None and latest_result is None and not can_trigger:
            raise TriggerForbiddenError
        answer = (
            latest_result.model_copy(update={"stale": True})
            if latest_result is not None
            else DataSampleResult(
                status=SampleStatus.PENDING, round_id=running.id if running else None
            )
        )
        expires_at = read_at + INTERIM_ANSWER_S
        if running is not None and time.monotonic() < expires_at:
            with self._cache_lock:
                if (self._rounds_ended.get(fresh_key, 0), self._forgotten) == seen:
                    self._interim[fresh_key] = (expires_at, answer, app.run)
        if started is not None:
            try:
                self._launch(app, vertex, started.id, actor, policy, narrowing)
            except BaseException:
                self._release(app.id, narrowing)
                raise
        return PollAnswer(answer, started.id if started else None)

    def slot_problem(self, application_id: int, narrowing: Narrowing) -> TooManyRoundsError | None:
        """Why no narrowed-round slot is free for the application, or ``None`` when one is
        (plain rounds need none: one per vertex and interval at most)."""
        if narrowing.is_plain():
            return None
        with self._cache_lock:
            return self._slot_problem_locked(application_id)

    def _slot_problem_locked(self, application_id: int) -> TooManyRoundsError | None:
        per_app = self._settings.narrowed_rounds_per_application
        per_replica = self._settings.narrowed_rounds_per_replica
        if self._narrowed_running.get(application_id, 0) >= per_app:
            return TooManyRoundsError(per_app, "narrowed_rounds_per_application")
        if sum(self._narrowed_running.values()) >= per_replica:
            return TooManyRoundsError(per_replica, "narrowed_rounds_per_replica")
        return None

    def _reserve(self, application_id: int, narrowing: Narrowing) -> None:
        """Take one of the narrowed-round slots of the application and of the replica.
        Raises :class:`TooManyRoundsError` when none is free."""
        if narrowing.is_plain():
            return
        with self._cache_lock:  # the check and the take are one step
            if (problem := self._slot_problem_locked(application_id)) is not None:
                raise problem
            self._narrowed_running[application_id] = (
                self._narrowed_running.get(application_id, 0) + 1
            )

    def _release(self, application_id: int, narrowing: Narrowing) -> None:
        if narrowing.is_plain():
            return
        with self._cache_lock:
            left = self._narrowed_running.get(application_id, 0) - 1
            if left > 0:
                self._narrowed_running[application_id] = left
            else:
                self._narrowed_running.pop(application_id, None)

    def _claim(
        self,
        app: Application,
        vertex: str,
        rid: str,
        actor: str,
        t: int,
        policy: RoundPolicy,
        request_key: str,
        abandoned_before: int,
    ) -> tuple[Round | None, Round | None]:
        """(the round this caller started, or None; the round running now, or None)."""
        started: Round | None = None
        with self._sessions.begin() as session:
            # The claim is one conditional UPDATE of the lease: a round another caller
            # claimed or finished since the read above makes it fail, as it would have
            # within one transaction.
            if repository.claim_round(
                session,
                app.id,
                vertex,
                rid,
                interval_ms=policy.refresh_ms,
                at=t,
                request_key=request_key,
            ):
                started = repository.create_round(
                    session,
                    rid,
                    app.id,
                    vertex,
                    triggered_by=actor,
                    at=t,
                    run=app.run,
                    request_key=request_key,
                )
                return started, started
            # Someone else won this interval; their round row committed with the claim.
            return None, repository.running_round(
                session,
                app.id,
                vertex,
                started_after=abandoned_before,
                run=app.run,
                request_key=request_key,
            )

    def check(self, app: Application, vertex: str, actor: str, narrowing: Narrowing) -> None:
        """Before a narrowed round starts: the executor checks the request it would run
        (local: the driver's round check; Kubernetes: a dry run of the DataSample). Raises
        :class:`~.execution.base.RoundRefused` when the request does not fit the vertex; a
        driver token the store key cannot open skips the check (the round records it)."""
        if narrowing.is_plain():
            return
        try:
            with self._sessions() as session:  # no query: the cipher rides on the session
                token = repository.driver_token(session, app)
        except ValueError:
            return
        # The round id is a stand-in: the round does not exist until its claim.
        request = self._request(
            app, vertex, secrets.token_hex(8), actor, self.policy(app), narrowing, token
        )
        self._executor.check(request)

    def _launch(
        self,
        app: Application,
        vertex: str,
        round_id: str,
        actor: str,
        policy: RoundPolicy,
        narrowing: Narrowing,
    ) -> None:
        token: str | None = None
        try:
            with self._sessions() as session:  # no query: the cipher rides on the session
                token = repository.driver_token(session, app)
        except ValueError as exc:  # StoreKeyMissing / StoreKeyInvalid: the driver says 401
            log.error("application %s/%s: %s", app.namespace, app.name, exc)
        request = self._request(app, vertex, round_id, actor, policy, narrowing, token)
        self._metrics.rounds_started.inc()
        future = self._pool.submit(self._run, request)
        self._futures.add(future)
        # Before the discard: once wait_idle() sees no round, their interim answers are gone.
        key = answer_key(app, vertex, narrowing.key())
        future.add_done_callback(lambda _: self._drop_interim(key))
        future.add_done_callback(lambda _: self._release(app.id, narrowing))
        future.add_done_callback(self._futures.discard)

    def _request(
        self,
        app: Application,
        vertex: str,
        round_id: str,
        actor: str,
        policy: RoundPolicy,
        narrowing: Narrowing,
        token: str | None,
    ) -> RoundRequest:
        return RoundRequest(
            round_id=round_id,
            namespace=app.namespace,
            application=app.name,
            vertex=vertex,
            sampling_window=self._settings.sampling_window,
            timeout_s=policy.deadline_s,
            poll_interval_s=self._settings.poll_interval_seconds,
            requested_by=actor,
            driver_url=app.driver_url,
            driver_token=token,
            memory_gate=self._memory_gate,
            max_record_length=policy.max_record_length,
            narrowing=None if narrowing.is_plain() else narrowing,
            application_api_version=app.api_version,
            results_url=(
                f"{self._settings.public_url.rstrip('/')}/api/v1/namespaces/{app.namespace}"
                f"/applications/{app.name}/rounds/{round_id}"
                if self._settings.public_url
                else None
            ),
        )

    def _run(self, request: RoundRequest) -> None:
        start = time.monotonic()
        holds_gate = False
        try:
            try:
                outcome = self._executor.run(request)
                result, ref, saved = outcome.result, outcome.external_ref, outcome.saved
                holds_gate, pieces = outcome.holds_gate, outcome.samples
                del outcome  # the result (up to ~50 MB) must go with the gate, below
            except Exception:
                log.exception(
                    "round %s of %s/%s crashed",
                    request.round_id,
                    request.application,
                    request.vertex,
                )
                result, ref, saved = failed(ErrorCode.INTERNAL_ERROR, request.round_id), None, False
                pieces = None
            if result.status is SampleStatus.PENDING:  # an executor must not return PENDING
                result = failed(ErrorCode.INTERNAL_ERROR, request.round_id)
            if not saved:
                # The service's round id names the round everywhere (the driver's is
                # external_ref).
                result = result.model_copy(
                    update={
                        "round_id": request.round_id,
                        "stale": False,
                        "end_timestamp": result.end_timestamp or repository.now_ms(),
                    }
                )
                try:
                    try:
                        self._save(request, result, ref, pieces)
                    except ResultRejected as exc:
                        # Nothing of it was written (one transaction): the round fails.
                        log.warning(
                            "round %s of %s/%s: the driver's result was refused: %s",
                            request.round_id,
                            request.application,
                            request.vertex,
                            exc,
                        )
                        result = failed(ErrorCode.INTERNAL_ERROR, request.round_id)
                        self._save(request, result, ref, None)
                    finally:
                        pieces = None
                except Exception:
                    log.exception("saving round %s failed", request.round_id)
                    return
            # Only the outcome is needed from here on, not the records: they are dropped
            # before the gate lets the next full result in.
            result = result.model_copy(update={"samples": []})
        finally:
            if holds_gate:
                self._memory_gate.release()
        if result.no_data_reason is NoDataReason.NO_MICRO_BATCH:
            try:  # the next poll starts a round that waits for the next micro-batch
                with self._sessions.begin() as session:
                    app = repository.get_application(
                        session, request.namespace, request.application
                    )
                    # Only the lease of the application the round ran for: another kind's
                    # under the same name replaced it meanwhile.
                    if app is not None and app.api_version == request.application_api_version:
                        repository.release_claim(
                            session,
                            app.id,
                            request.vertex,
                            request.round_id,
                            at=repository.now_ms(),
                            request_key=(request.narrowing or PLAIN).key(),
                        )
            except Exception:
                log.exception("releasing the claim of round %s failed", request.round_id)
        self._metrics.rounds.labels(result.status.value).inc()
        self._metrics.round_duration.observe(time.monotonic() - start)

    def _prune(self, now_ms: int, now: float) -> None:
        """Drop expired answers (called with the cache lock held, when a poll reads the
        store): both maps then hold only vertices polled within their lifetimes. Every
        ``ENDED_SWEEP_S`` the end counters of requests with no answer held go too (each
        distinct filter has one): a poll reading the store meanwhile keeps nothing, as after
        forget(), since its counter may have been among them."""
        for k in [k for k, (exp, _, _) in self._fresh.items() if exp <= now_ms]:
            del self._fresh[k]
        for k in [k for k, (exp, _, _) in self._interim.items() if exp <= now]:
            del self._interim[k]
        if now - self._ended_swept_at >= ENDED_SWEEP_S:
            self._ended_swept_at = now
            held = self._fresh.keys() | self._interim.keys()
            idle = [k for k in self._rounds_ended if k not in held]
            if idle:
                self._forgotten += 1
                for k in idle:
                    del self._rounds_ended[k]

    def _drop_interim(self, key: AnswerKey) -> None:
        """Forget the answer given while a round of ``key`` ran (it just ended): the next
        poll reads the store and finds the new result."""
        with self._cache_lock:
            self._interim.pop(key, None)
            self._rounds_ended[key] = self._rounds_ended.get(key, 0) + 1

    def _save(
        self,
        request: RoundRequest,
        result: DataSampleResult,
        ref: str | None,
        pieces: Iterator[SubtaskSamples] | None,
    ) -> None:
        """Store ``result`` (its records from ``pieces`` when given) in one transaction."""
        with self._sessions.begin() as session:
            repository.save_round(
                session,
                namespace=request.namespace,
                application=request.application,
                vertex=request.vertex,
                result=result,
                round_id=request.round_id,
                external_ref=ref,
                samples=pieces,
                api_version=request.application_api_version,
            )

    def forget(self, application_id: int) -> None:
        """Drop cached answers of an application row (it was deleted, replaced by another
        kind's application of its name, or re-registered)."""
        with self._cache_lock:
            self._forgotten += 1
            for cache in (self._fresh, self._interim, self._rounds_ended):
                for key in [k for k in cache if k[0] == application_id]:
                    del cache[key]

    def wait_idle(self, timeout: float = 60.0) -> bool:
        """Block until every running round ended, at most ``timeout`` seconds (tests,
        shutdown); whether they all did."""
        deadline = time.monotonic() + timeout
        while self._futures and time.monotonic() < deadline:
            time.sleep(0.02)
        return not self._futures

    def close(self) -> None:
        """Stop accepting rounds; running rounds finish."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.drivers.close()
