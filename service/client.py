"""A small client of the service's data-sample API (for ``sparkglass sample --service``).

Example::

    from sparkglass.service.client import ServiceClient
    with ServiceClient("http://127.0.0.1:8080", token) as c:
        result = c.sample("flights", "parse", max_records=20)   # waits for the round
        bad = c.sample("flights", "parse",
                       request=round_request(kind="violations", filter="carrier = 'UA'"))
"""

from __future__ import annotations

import time
from types import TracebackType

import httpx

from sparkglass.runtime.contract.errors import SparkglassError
from sparkglass.runtime.contract.round_request import RoundRequest
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
        #: The last body per request (path and query) with its ETag: a poll sends the tag and
        #: a ``304`` answer reuses the body (httpx asks for gzip by itself).
        self._held: dict[str, tuple[str, DataSampleResult]] = {}

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
        request: RoundRequest | None = None,
    ) -> DataSampleResult:
        """One ``GET .../data-sample`` (may start a round and answer ``PENDING``). The body of
        the previous poll of the same request is revalidated with its ``ETag``: an unchanged
        result costs the service a ``304`` and is returned from memory.

        ``request``: the round's ``kind``, ``filter``, ``columns`` and ``expectation``
        (:func:`~sparkglass.runtime.contract.round_request.round_request`; local mode, the
        token needs the sampler role). Raises :class:`ServiceError` for a refusal (422 names
        the parameter that does not fit the vertex) and ``httpx.HTTPError`` when unreachable.
        """
        params: dict[str, int | str] = dict(request.query_params()) if request else {}
        if subtask_index is not None:
            params["subtaskIndex"] = subtask_index
        if max_records is not None:
            params["maxRecords"] = max_records
        path = (
            f"/api/v1/namespaces/{namespace}/applications/{application}/vertices/{vertex}"
            "/data-sample"
        )
        key = str(httpx.URL(path, params=params))
        held = self._held.get(key)
        headers = {"If-None-Match": held[0]} if held else {}
        r = self._http.get(path, params=params, headers=headers)
        if r.status_code == 304 and held:
            return held[1]
        if r.status_code != 200:
            try:
                detail = str(r.json().get("detail", r.text))
            except ValueError:
                detail = r.text
            raise ServiceError(f"service answered {r.status_code}: {detail}", r.status_code)
        result = DataSampleResult.model_validate_json(r.content)
        etag = r.headers.get("etag")
        if etag:
            # One body per request kept: a poll loop holds the last answer, nothing more.
            self._held = {key: (etag, result)}
        return result

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
        request: RoundRequest | None = None,
    ) -> DataSampleResult:
        """Poll until the answer is a finished, non-stale result (or ``wait_seconds`` pass,
        then the last answer is returned as is). ``request``: as for :meth:`poll`."""
        deadline = time.monotonic() + wait_seconds
        while True:
            result = self.poll(
                application,
                vertex,
                namespace=namespace,
                subtask_index=subtask_index,
                max_records=max_records,
                request=request,
            )
            finished = result.status is not SampleStatus.PENDING and not result.stale
            if finished or time.monotonic() >= deadline:
                return result
            time.sleep(poll_seconds)
