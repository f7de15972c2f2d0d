"""A small client of the service's data-sample API (for ``sparkglass sample --service``).

Example::

    from sparkglass.service.client import ServiceClient
    with ServiceClient("http://127.0.0.1:8080", token) as c:
        result = c.sample("flights", "parse", max_records=20)   # waits for the round
"""

from __future__ import annotations

import time
from types import TracebackType

import httpx

from sparkglass.runtime.contract.errors import SparkglassError
from sparkglass.runtime.contract.sample_result import DataSampleResult, SampleStatus

from .settings import LOCAL_NAMESPACE


class ServiceError(SparkglassError):
    """The service refused the request; ``status_code`` is the HTTP code (401, 403, 404, 422,
    503) and the message the service's ``detail``."""

    def __init__(self, message: str, status_code: int) -> None:
        super().__init__(message)
        self.status_code = status_code


class ServiceClient:
    """Talks to one service with one bearer token."""

    def __init__(self, url: str, token: str, *, timeout: float = 30.0) -> None:
        self._http = httpx.Client(
            base_url=url.rstrip("/"),
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout,
        )

    def __enter__(self) -> ServiceClient:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def poll(
        self,
        application: str,
        vertex: str,
        *,
        namespace: str = LOCAL_NAMESPACE,
        subtask_index: int | None = None,
        max_records: int | None = None,
    ) -> DataSampleResult:
        """One ``GET .../data-sample`` (may start a round and answer ``PENDING``).

        Raises :class:`ServiceError` for a refusal and ``httpx.HTTPError`` when unreachable.
        """
        params: dict[str, int] = {}
        if subtask_index is not None:
            params["subtaskIndex"] = subtask_index
        if max_records is not None:
            params["maxRecords"] = max_records
        r = self._http.get(
            f"/api/v1/namespaces/{namespace}/applications/{application}/vertices/{vertex}"
            "/data-sample",
            params=params,
        )
        if r.status_code != 200:
            try:
                detail = str(r.json().get("detail", r.text))
            except ValueError:
                detail = r.text
            raise ServiceError(f"service answered {r.status_code}: {detail}", r.status_code)
        return DataSampleResult.model_validate_json(r.content)

    def sample(
        self,
        application: str,
        vertex: str,
        *,
        namespace: str = LOCAL_NAMESPACE,
        subtask_index: int | None = None,
        max_records: int | None = None,
        wait_seconds: float = 60.0,
        poll_seconds: float = 1.0,
    ) -> DataSampleResult:
        """Poll until the answer is a finished, non-stale result (or ``wait_seconds`` pass,
        then the last answer is returned as is)."""
        deadline = time.monotonic() + wait_seconds
        while True:
            result = self.poll(
                application,
                vertex,
                namespace=namespace,
                subtask_index=subtask_index,
                max_records=max_records,
            )
            finished = result.status is not SampleStatus.PENDING and not result.stale
            if finished or time.monotonic() >= deadline:
                return result
            time.sleep(poll_seconds)
