"""Kubernetes mode: a round is a ``DataSample`` custom resource the operator runs.

The service creates ``sparkglass.io/v1alpha1`` ``DataSample`` ``{app}-{vertex}-{id}`` in the
application's namespace (spec: ``applicationRef.name``, ``vertex``, ``maxRecords``,
``samplingWindow``, ``ttlSecondsAfterFinished``; annotation ``sparkglass.io/round-id`` = the
service's round id; ``sparkglass.io/results-url`` = where the service serves the full
result, when ``public_url`` is set), then reads its ``status.phase`` until it is terminal.
The operator saves the full result in the shared store under that round id
(``store.save_round``) once it checked that the DataSample is the service's (its name is
:func:`datasample_name` of the round, and the round is the application's); when it has not,
the bounded samples of the status are used (read with
:func:`sparkglass.runtime.contract.datasample_status.decode`).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from sparkglass.runtime.contract.datasample_status import decode
from sparkglass.runtime.contract.sample_result import (
    MAX_RECORDS_PER_RESPONSE,
    DataSampleResult,
    ErrorCode,
)

from .base import RoundOutcome, RoundRequest, failed

log = logging.getLogger(__name__)

GROUP = "sparkglass.io"
VERSION = "v1alpha1"
PLURAL = "datasamples"
ROUND_ID_ANNOTATION = "sparkglass.io/round-id"
REQUESTED_BY_ANNOTATION = "sparkglass.io/requested-by"
RESULTS_URL_ANNOTATION = "sparkglass.io/results-url"
APPLICATION_LABEL = "sparkglass.io/application"
VERTEX_LABEL = "sparkglass.io/vertex"

#: Given a round id, the outcome of the round the operator saved in the store, if it did
#: (the records may be left out: they stay in the store).
StoredResultLookup = Callable[[str], DataSampleResult | None]


def datasample_name(application: str, vertex: str, round_id: str) -> str:
    """A DNS-1123 subdomain name for the round's DataSample (≤ 253 characters).

    Part of the round-id handshake: the operator saves under the ``sparkglass.io/round-id``
    annotation only a DataSample bearing exactly this name for that round (annotations are
    user-settable, names are unique per namespace), so changing this changes the operator.
    """
    raw = f"{application}-{vertex}"[:240].lower()
    raw = re.sub(r"[^a-z0-9.-]", "-", raw).strip("-.")
    return f"{raw}-{round_id[:12]}"


def datasample_body(request: RoundRequest, ttl_seconds: int) -> dict[str, Any]:
    """The ``DataSample`` object the service creates for ``request``."""
    name = datasample_name(request.application, request.vertex, request.round_id)
    annotations = {ROUND_ID_ANNOTATION: request.round_id}
    if request.results_url:
        # The operator copies it into status.resultsURL (the full result lives here).
        annotations[RESULTS_URL_ANNOTATION] = request.results_url
    if request.requested_by:
        annotations[REQUESTED_BY_ANNOTATION] = request.requested_by[:253]
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "DataSample",
        "metadata": {
            "name": name,
            "namespace": request.namespace,
            "labels": {
                APPLICATION_LABEL: request.application[:63],
                VERTEX_LABEL: request.vertex,
            },
            "annotations": annotations,
        },
        "spec": {
            "applicationRef": {"name": request.application},
            "vertex": request.vertex,
            "maxRecords": MAX_RECORDS_PER_RESPONSE,
            **({"samplingWindow": request.sampling_window} if request.sampling_window else {}),
            "ttlSecondsAfterFinished": ttl_seconds,
        },
    }


class DataSampleExecutor:
    """Creates DataSamples and waits for the operator to finish them."""

    def __init__(
        self,
        api_client: client.ApiClient,
        stored_result: StoredResultLookup,
        *,
        ttl_seconds: int = 600,
    ) -> None:
        self._api = client.CustomObjectsApi(api_client)
        self._stored_result = stored_result
        self._ttl = ttl_seconds

    def run(self, request: RoundRequest) -> RoundOutcome:
        """Create the DataSample, poll its status until terminal or ``timeout_s``."""
        body = datasample_body(request, self._ttl)
        name = body["metadata"]["name"]
        deadline = time.monotonic() + request.timeout_s
        try:
            self._api.create_namespaced_custom_object(
                GROUP, VERSION, request.namespace, PLURAL, body, _request_timeout=10
            )
            while time.monotonic() < deadline:
                time.sleep(request.poll_interval_s)
                stored = self._stored_result(request.round_id)
                if stored is not None:
                    return RoundOutcome(stored, external_ref=name, saved=True)
                obj: dict[str, Any] = self._api.get_namespaced_custom_object(  # type: ignore[assignment]
                    GROUP, VERSION, request.namespace, PLURAL, name, _request_timeout=10
                )
                status = (obj or {}).get("status") or {}
                result = decode(status, request.round_id)
                if result is not None:
                    # The operator may store the full result right after the status: prefer it.
                    stored = self._stored_result(request.round_id)
                    if stored is not None:
                        return RoundOutcome(stored, external_ref=name, saved=True)
                    return RoundOutcome(result, external_ref=name)
            return RoundOutcome(failed(ErrorCode.TIMEOUT, request.round_id), external_ref=name)
        except (ApiException, HTTPError, OSError) as exc:
            log.warning(
                "DataSample %s/%s: API error %s",
                request.namespace,
                name,
                getattr(exc, "status", ""),
            )
            return RoundOutcome(failed(ErrorCode.INTERNAL_ERROR, request.round_id), name)
