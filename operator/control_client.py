"""Client of a Spark driver's control endpoint (contract: ``runtime/sample_result.py``).

Only the two calls a ``DataSample`` needs: open a round at a vertex, and read a round.
Failures are classified for the retry policy:

* :class:`ControlUnavailable` – transient: no connection, a timeout, HTTP 5xx, or HTTP 429
  (too many concurrent rounds, ``error_code`` set). Retried with back-off up to
  ``backoffLimit``.
* :class:`ControlRejected` – permanent: HTTP 4xx other than 429 (unknown vertex or round,
  bad parameter, bad token). ``status`` is the HTTP status; the message is the driver's.

The bearer token is sent in a header only; it never appears in messages or logs.
"""

from __future__ import annotations

from typing import Any

import httpx
from pydantic import ValidationError

from sparkglass.runtime.contract.sample_result import DataSampleResult, ErrorCode


class ControlError(Exception):
    """Base of the control endpoint errors."""


class ControlUnavailable(ControlError):
    """A transient failure; ``error_code`` is set when the driver said why (429)."""

    def __init__(self, message: str, error_code: ErrorCode | None = None) -> None:
        super().__init__(message)
        self.error_code = error_code


class ControlRejected(ControlError):
    """A permanent refusal (HTTP 4xx but 429); ``status`` is the HTTP status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class ControlClient:
    """Calls one driver's control endpoint at ``base_url`` (e.g. ``http://10.0.0.5:4045``).

    ``timeout`` is per request, in seconds. Use as an async context manager.
    """

    def __init__(self, base_url: str, token: str, *, timeout: float = 10.0) -> None:
        self._client = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout,
        )

    async def __aenter__(self) -> ControlClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._client.aclose()

    async def open_round(self, vertex: str, *, sampling_window: str | None) -> DataSampleResult:
        """``POST /api/v1/vertices/{vertex}/rounds``: ``PENDING`` with a ``roundId``, or
        ``DISABLED`` when sampling is off. Raises :class:`ControlError`."""
        params = {"samplingWindow": sampling_window} if sampling_window else {}
        return await self._request("POST", f"/api/v1/vertices/{vertex}/rounds", params)

    async def get_round(
        self, round_id: str, *, max_records: int, subtask_index: int | None
    ) -> DataSampleResult:
        """``GET /api/v1/rounds/{roundId}``: the round, ``PENDING`` while it runs.
        Raises :class:`ControlError` (``ControlRejected`` 404 when the driver lost it)."""
        params: dict[str, Any] = {"maxRecords": max_records}
        if subtask_index is not None:
            params["subtaskIndex"] = subtask_index
        return await self._request("GET", f"/api/v1/rounds/{round_id}", params)

    async def _request(self, method: str, path: str, params: dict[str, Any]) -> DataSampleResult:
        try:
            response = await self._client.request(method, path, params=params)
        except httpx.HTTPError as exc:
            raise ControlUnavailable(
                f"driver control endpoint unreachable: {type(exc).__name__}: {exc}"
            ) from None
        body = _json(response)
        if response.status_code == 429:
            raise ControlUnavailable(
                "the driver already runs its maximum of concurrent rounds",
                ErrorCode.TOO_MANY_CONCURRENT_ROUNDS,
            )
        if response.status_code >= 500:
            raise ControlUnavailable(
                f"driver control endpoint answered HTTP {response.status_code}: {_detail(body)}"
            )
        if response.status_code >= 400:
            raise ControlRejected(response.status_code, _detail(body))
        try:
            return DataSampleResult.model_validate(body)
        except ValidationError as exc:
            raise ControlUnavailable(f"driver answered an unexpected body: {exc}") from None


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return {"detail": response.text[:500]}


def _detail(body: Any) -> str:
    if isinstance(body, dict):
        for key in ("detail", "message", "error"):
            if body.get(key):
                return str(body[key])[:1000]
    return str(body)[:1000]
