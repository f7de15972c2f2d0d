"""Local mode: the service calls the Spark driver's control endpoint itself.

Contract (``sparkglass.runtime.contract.sample_result``):
``POST {driver}/api/v1/vertices/{vertex}/rounds?samplingWindow=3s`` answers 202 ``PENDING``
with a ``roundId`` (429 ``FAILED``
``TOO_MANY_CONCURRENT_ROUNDS`` when 5 rounds run; 200 ``DISABLED`` when sampling is off);
``GET {driver}/api/v1/rounds/{roundId}`` answers the round until it is no longer ``PENDING``.
"""

from __future__ import annotations

import logging
import time

import httpx
from pydantic import ValidationError

from sparkglass.runtime.contract.sample_result import DataSampleResult, ErrorCode, SampleStatus

from .base import RoundOutcome, RoundRequest, failed

log = logging.getLogger(__name__)


class LocalDriverExecutor:
    """Runs rounds through the driver control endpoint over HTTP (httpx, sync)."""

    def __init__(self, http: httpx.Client | None = None) -> None:
        self._http = http or httpx.Client(timeout=httpx.Timeout(10.0, connect=3.0))

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._http.close()

    def run(self, request: RoundRequest) -> RoundOutcome:
        """POST a round, then GET it every ``poll_interval_s`` until it ends or times out."""
        if not request.driver_url:
            log.warning("application %s has no driver URL", request.application)
            return RoundOutcome(failed(ErrorCode.INTERNAL_ERROR, request.round_id))
        base = request.driver_url.rstrip("/")
        headers = {"Authorization": f"Bearer {request.driver_token or ''}"}
        deadline = time.monotonic() + request.timeout_s
        try:
            resp = self._http.post(
                f"{base}/api/v1/vertices/{request.vertex}/rounds",
                params=(
                    {"samplingWindow": request.sampling_window} if request.sampling_window else {}
                ),
                headers=headers,
            )
            first = self._parse(resp)
            if first is None:
                return RoundOutcome(failed(ErrorCode.INTERNAL_ERROR, request.round_id))
            if first.status is not SampleStatus.PENDING:
                return RoundOutcome(first, external_ref=first.round_id)
            driver_round = first.round_id
            if not driver_round:
                log.warning("driver answered PENDING without a roundId")
                return RoundOutcome(failed(ErrorCode.INTERNAL_ERROR, request.round_id))
            while time.monotonic() < deadline:
                time.sleep(request.poll_interval_s)
                resp = self._http.get(f"{base}/api/v1/rounds/{driver_round}", headers=headers)
                current = self._parse(resp)
                if current is None:
                    return RoundOutcome(
                        failed(ErrorCode.INTERNAL_ERROR, request.round_id), driver_round
                    )
                if current.status is not SampleStatus.PENDING:
                    return RoundOutcome(current, external_ref=driver_round)
            return RoundOutcome(failed(ErrorCode.TIMEOUT, request.round_id), driver_round)
        except httpx.HTTPError as exc:
            # The driver is gone or unreachable: the round cannot complete.
            log.warning("driver of %s unreachable: %s", request.application, type(exc).__name__)
            return RoundOutcome(failed(ErrorCode.INTERNAL_ERROR, request.round_id))

    @staticmethod
    def _parse(resp: httpx.Response) -> DataSampleResult | None:
        """The body as a result when the status code carries one (200/202/429), else None."""
        if resp.status_code not in (200, 202, 429):
            log.warning("driver answered HTTP %s", resp.status_code)
            return None
        try:
            return DataSampleResult.model_validate_json(resp.content)
        except ValidationError:
            log.warning("driver answered a body that is not a DataSampleResult")
            return None
