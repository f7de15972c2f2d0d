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

import httpx

from sparkglass.runtime.contract.sample_result import ErrorCode, SampleStatus
from sparkglass.runtime.control.client import ControlClient, ControlRejected, ControlUnavailable

from .base import RoundOutcome, RoundRequest, failed

log = logging.getLogger(__name__)

#: Per-request timeouts towards a driver, seconds (a round's own deadline is ``timeout_s``).
REQUEST_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 3.0


class LocalDriverExecutor:
    """Runs rounds through the driver control endpoint over HTTP (sync; one shared pool)."""

    def __init__(self, http: httpx.Client | None = None) -> None:
        self._http = http or httpx.Client()

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._http.close()

    def run(self, request: RoundRequest) -> RoundOutcome:
        """POST a round, then GET it every ``poll_interval_s`` until it ends or times out."""
        if not request.driver_url:
            log.warning("application %s has no driver URL", request.application)
            return RoundOutcome(failed(ErrorCode.INTERNAL_ERROR, request.round_id))
        deadline = time.monotonic() + request.timeout_s
        driver = ControlClient(
            request.driver_url,
            request.driver_token or "",
            timeout_s=REQUEST_TIMEOUT_S,
            connect_timeout_s=CONNECT_TIMEOUT_S,
            http=self._http,
        )
        driver_round: str | None = None
        try:
            first = driver.open_round(request.vertex, request.sampling_window)
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
            gate = request.memory_gate
            if gate is not None:
                gate.acquire()
            try:
                full = driver.get_round(driver_round)
            except BaseException:
                if gate is not None:
                    gate.release()
                raise
            return RoundOutcome(full, external_ref=driver_round, holds_gate=gate is not None)
        except ControlUnavailable as exc:
            if exc.error_code is not None:  # the driver said why (429): the round's outcome
                return RoundOutcome(failed(exc.error_code, request.round_id), driver_round)
            # The driver is gone, unreachable or broken: the round cannot complete.
            log.warning("driver of %s: %s", request.application, exc)
            return RoundOutcome(failed(ErrorCode.INTERNAL_ERROR, request.round_id), driver_round)
        except ControlRejected as exc:
            log.warning("driver of %s answered HTTP %s: %s", request.application, exc.status, exc)
            return RoundOutcome(failed(ErrorCode.INTERNAL_ERROR, request.round_id), driver_round)
