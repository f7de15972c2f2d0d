"""Local mode: the service calls the Spark driver's control endpoint itself.

Contract (``sparkglass.runtime.contract.sample_result``), through
:class:`~sparkglass.runtime.control.client.ControlClient`:
``POST {driver}/api/v1/vertices/{vertex}/rounds?samplingWindow=3s`` answers 202 ``PENDING``
with a ``roundId`` (429 ``FAILED``
``TOO_MANY_CONCURRENT_ROUNDS`` when 5 rounds run; 200 ``DISABLED`` when sampling is off);
``GET {driver}/api/v1/rounds/{roundId}`` answers the round until it is no longer ``PENDING``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import replace

import httpx

from sparkglass.runtime.contract.result_caps import ResultCaps, ResultRejected
from sparkglass.runtime.contract.sample_result import (
    DataSampleResult,
    ErrorCode,
    SampleStatus,
    SubtaskSamples,
)
from sparkglass.runtime.control.client import (
    ControlClient,
    ControlError,
    ControlRejected,
    ControlUnavailable,
)

from ..driver_trust import DriverTrust
from .base import RoundOutcome, RoundRefused, RoundRequest, failed

log = logging.getLogger(__name__)

#: Per-request timeouts towards a driver, seconds (a round's own deadline is ``timeout_s``).
REQUEST_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 3.0


def _subtasks(
    driver: ControlClient,
    driver_round: str,
    indices: list[int],
    first: DataSampleResult,
    caps: ResultCaps,
) -> Iterator[SubtaskSamples]:
    """The records of ``driver_round``, one subtask (at most 1000 records) per request:
    ``first`` is the answer for ``indices[0]``, already fetched."""
    answer: DataSampleResult | None = first
    for i in indices:
        if answer is None:
            try:
                answer = driver.get_round(driver_round, subtask_index=i)
            except ControlError as exc:
                raise ResultRejected(f"fetching subtask {i}: {exc}") from None
        for sub in answer.samples:
            if sub.subtask_index != i:
                raise ResultRejected(f"asked for subtask {i}, got subtask {sub.subtask_index}")
            caps.check(sub)
            yield sub
        answer = None


def _closing(pieces: Iterator[SubtaskSamples], driver: ControlClient) -> Iterator[SubtaskSamples]:
    """``pieces``, closing ``driver`` once they are consumed or abandoned."""
    try:
        yield from pieces
    finally:
        driver.close()


class LocalDriverExecutor:
    """Runs rounds through the driver control endpoint over HTTP(S) (sync; one shared pool).

    ``trust``: the pinned certificate of each registered ``https://`` driver; a driver with
    one gets a connection of its own that trusts only it, the others share the pool (which
    verifies ``https://`` drivers against the system's CAs). A certificate that fails
    verification fails the round before the token is sent.
    """

    def __init__(self, http: httpx.Client | None = None, trust: DriverTrust | None = None) -> None:
        self._http = http or httpx.Client()
        self._trust = trust

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._http.close()

    def check(self, request: RoundRequest) -> None:
        """Ask the driver whether it takes the narrowed ``request`` (its round check, which
        opens nothing), so that a filter or column that does not fit the vertex is refused at
        once instead of failing a round. Only the driver's 400 refuses
        (:class:`RoundRefused`, naming the parameter); any other trouble (no answer, an
        older driver without the check, a pinned certificate for a URL that is not
        https://) returns, and the round starts and records it."""
        if not request.driver_url or request.narrowing is None:
            return
        try:
            tls = self._trust.get(request.namespace, request.application) if self._trust else None
            with ControlClient(request.driver_url, request.driver_token or "", tls=tls) as driver:
                driver.check_round(request.vertex, None, request=request.narrowing)
        except ControlRejected as exc:
            if exc.status == 400:
                raise RoundRefused(exc.field, str(exc)) from None
        except (ControlError, ValueError):
            pass

    def run(self, request: RoundRequest) -> RoundOutcome:
        """POST a round, then GET it every ``poll_interval_s`` until it ends or times out."""
        if not request.driver_url:
            log.warning("application %s has no driver URL", request.application)
            return RoundOutcome(failed(ErrorCode.INTERNAL_ERROR, request.round_id))
        deadline = time.monotonic() + request.timeout_s
        tls = self._trust.get(request.namespace, request.application) if self._trust else None
        try:
            driver = ControlClient(
                request.driver_url,
                request.driver_token or "",
                timeout_s=REQUEST_TIMEOUT_S,
                connect_timeout_s=CONNECT_TIMEOUT_S,
                http=None if tls else self._http,
                tls=tls,
            )
        except ValueError as exc:  # a pinned certificate for a URL that is not https://
            log.warning("driver of %s: %s", request.application, exc)
            return RoundOutcome(failed(ErrorCode.INTERNAL_ERROR, request.round_id))
        outcome: RoundOutcome | None = None
        try:
            outcome = self._round(driver, request, deadline)
        finally:
            if outcome is None or outcome.samples is None:
                driver.close()
        if outcome.samples is not None:
            # The records are fetched while they are saved: the client (a connection of its
            # own for a pinned driver) stays open until then.
            return replace(outcome, samples=_closing(outcome.samples, driver))
        return outcome

    def _round(self, driver: ControlClient, request: RoundRequest, deadline: float) -> RoundOutcome:
        driver_round: str | None = None
        try:
            first = driver.open_round(
                request.vertex, request.sampling_window, request=request.narrowing
            )
            if first.status is not SampleStatus.PENDING:
                return RoundOutcome(first, external_ref=first.round_id)
            driver_round = first.round_id
            if not driver_round:
                log.warning("driver answered PENDING without a roundId")
                return RoundOutcome(failed(ErrorCode.INTERNAL_ERROR, request.round_id))
            # Polled with maxRecords=1: a finished round's full result (up to ~50 MB) is
            # fetched once, below, under the memory gate.
            last = driver.wait_for_round(
                driver_round,
                timeout_s=max(0.0, deadline - time.monotonic()),
                poll_interval_s=request.poll_interval_s,
                max_records=1,
            )
            if last.status is SampleStatus.PENDING:
                return RoundOutcome(failed(ErrorCode.TIMEOUT, request.round_id), driver_round)
            if last.record_count() == 0:  # nothing was cut: this is the whole result
                return RoundOutcome(last, external_ref=driver_round)
            # The maxRecords cut keeps every subtask's entry: these are all the subtasks.
            indices = [s.subtask_index for s in last.samples]
            gate = request.memory_gate
            if gate is not None:
                gate.acquire()
            try:
                first_piece = driver.get_round(driver_round, subtask_index=indices[0])
            except BaseException:
                if gate is not None:
                    gate.release()
                raise
            # The head as the driver has it (the maxRecords=1 answer says "truncated" for its
            # own cut); the records follow one subtask at a time while they are saved.
            head = last.model_copy(
                update={"samples": [], "total_truncated": first_piece.total_truncated}
            )
            pieces = _subtasks(
                driver, driver_round, indices, first_piece, ResultCaps(request.max_record_length)
            )
            return RoundOutcome(
                head, external_ref=driver_round, holds_gate=gate is not None, samples=pieces
            )
        except ControlUnavailable as exc:
            if exc.error_code is not None:  # the driver said why (429): the round's outcome
                return RoundOutcome(failed(exc.error_code, request.round_id), driver_round)
            # The driver is gone, unreachable or broken: the round cannot complete.
            log.warning("driver of %s: %s", request.application, exc)
            return RoundOutcome(failed(ErrorCode.INTERNAL_ERROR, request.round_id), driver_round)
        except ControlRejected as exc:
            log.warning("driver of %s answered HTTP %s: %s", request.application, exc.status, exc)
            return RoundOutcome(failed(ErrorCode.INTERNAL_ERROR, request.round_id), driver_round)
