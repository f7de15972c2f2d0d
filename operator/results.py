"""Handing a DataSample's full result to the sparkglass service, keyed by its uid.

The operator PUTs the result to the service
(``/api/v1/namespaces/{namespace}/datasamples/{name}/result``, the body a
:class:`~sparkglass.runtime.contract.saved_result.ResultUpload`), which saves it in the round
bound to the DataSample's ``metadata.uid`` and serves it at :func:`results_url`. The status
then needs only the phase, the counts and that link. The operator never opens the service's
database: one writer, one migrator.

The token is read from a file at each call: the chart mounts a projected ServiceAccount token
of the service's audience, which the kubelet rotates.
"""

from __future__ import annotations

import ssl
from pathlib import Path

import httpx
import structlog

from sparkglass.runtime.contract.sample_result import DataSampleResult
from sparkglass.runtime.contract.saved_result import ResultSaved, ResultUpload

log = structlog.get_logger(__name__)

#: Where the chart mounts the operator's token for the service (a projected ServiceAccount
#: token of the service's audience).
DEFAULT_TOKEN_FILE = "/var/run/secrets/sparkglass/service/token"

#: Seconds for one PUT: up to 64 MiB of JSON to a service in the same cluster.
TIMEOUT_S = 60.0


class ResultRefused(Exception):
    """The service answered the result with a refusal that a retry cannot change (4xx); the
    message carries its status and detail."""


class RoundIdConflict(ResultRefused):
    """The round the result would be saved in belongs to another application or vertex (the
    service's 409; nothing was written)."""


class ResultServiceUnavailable(Exception):
    """The service could not be reached or answered 5xx/429: worth a retry."""


class ResultPush:
    """The service's result route at ``base_url`` (its address inside the cluster)."""

    def __init__(self, base_url: str, token_file: str, ca_file: str | None = None) -> None:
        self._base = base_url.rstrip("/")
        self._token_file = Path(token_file)
        self._verify: ssl.SSLContext | bool = (
            ssl.create_default_context(cafile=ca_file) if ca_file else True
        )
        self._client: httpx.AsyncClient | None = None

    def _token(self) -> str:
        try:
            return self._token_file.read_text().strip()
        except OSError as exc:
            raise ResultServiceUnavailable(
                f"the token for the service cannot be read from {self._token_file}: "
                f"{exc.strerror or exc}"
            ) from None

    async def save(
        self,
        *,
        namespace: str,
        name: str,
        uid: str,
        application: str,
        vertex: str,
        result: DataSampleResult,
        started_at_ms: int | None,
        request_key: str,
        max_record_length: int,
    ) -> str:
        """Save (or replace) the result of the DataSample ``name`` of ``metadata.uid``
        ``uid``; returns the store's round id. Raises :class:`RoundIdConflict` (409),
        :class:`ResultRefused` (another 4xx: the token, the identity or the body is wrong,
        and a retry would not change it) or :class:`ResultServiceUnavailable` (unreachable,
        429 or 5xx)."""
        upload = ResultUpload(
            uid=uid,
            application=application,
            vertex=vertex,
            request_key=request_key,
            started_at_ms=started_at_ms,
            max_record_length=max_record_length,
            result=result,
        )
        if self._client is None:
            self._client = httpx.AsyncClient(verify=self._verify, timeout=TIMEOUT_S)
        url = f"{self._base}/api/v1/namespaces/{namespace}/datasamples/{name}/result"
        try:
            answer = await self._client.put(
                url,
                content=upload.model_dump_json(by_alias=True),
                headers={
                    "Authorization": f"Bearer {self._token()}",
                    "Content-Type": "application/json",
                },
            )
        except httpx.HTTPError as exc:
            raise ResultServiceUnavailable(
                f"the service at {self._base} cannot be reached: {type(exc).__name__}"
            ) from None
        if answer.status_code == 200:
            return ResultSaved.model_validate_json(answer.content).round_id
        detail = _detail(answer)
        if answer.status_code == 409:
            raise RoundIdConflict(detail)
        if answer.status_code == 429 or answer.status_code >= 500:
            raise ResultServiceUnavailable(f"the service answered {answer.status_code}: {detail}")
        raise ResultRefused(f"the service refused the result ({answer.status_code}): {detail}")

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def _detail(answer: httpx.Response) -> str:
    """The ``detail`` of an error answer, bounded (it goes into a status message)."""
    try:
        detail = answer.json().get("detail")
    except ValueError:
        detail = None
    return str(detail if detail is not None else answer.reason_phrase)[:300]


def results_url(service_url: str, namespace: str, application: str, round_id: str) -> str:
    """The service URL of a stored round's full result."""
    return (
        f"{service_url.rstrip('/')}/api/v1/namespaces/{namespace}/applications/"
        f"{application}/rounds/{round_id}"
    )
