"""The round execution interface: one protocol, two implementations (local, Kubernetes)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from sparkglass.runtime.contract.round_request import RoundRequest as Narrowing
from sparkglass.runtime.contract.sample_result import (
    DataSampleResult,
    ErrorCode,
    SampleStatus,
    SubtaskSamples,
)
from sparkglass.service.store.repository import now_ms


@dataclass(frozen=True)
class RoundRequest:
    """Everything an executor needs to run one round.

    ``timeout_s`` bounds the whole round as the service sees it (seconds).
    ``driver_url``/``driver_token`` are set in local mode only (the token is a secret).
    ``max_record_length`` is the application's ``max-record-length`` (characters): a
    driver's record longer than it breaks the contract and fails the round.
    ``memory_gate`` bounds how many full results (up to ~50 MB each) the service holds at
    once: an executor that brings a full result into memory acquires it first and returns
    with ``RoundOutcome.holds_gate`` set; the caller releases it once the result is saved.
    ``narrowing``: the round's kind, filter, columns and expectation; None for a plain round.
    ``application_api_version``: another operator's application's (Kubernetes mode).
    """

    round_id: str
    namespace: str
    application: str
    vertex: str
    sampling_window: str | None
    timeout_s: float
    poll_interval_s: float
    requested_by: str
    driver_url: str | None = None
    driver_token: str | None = None
    results_url: str | None = None
    max_record_length: int = 10_000
    memory_gate: threading.Semaphore | None = None
    narrowing: Narrowing | None = None
    #: Kubernetes mode: the ``apiVersion`` of another operator's SparkApplication (Kubeflow's,
    #: Apache Spark's) for the DataSample's ``applicationRef``; None for sparkglass's own.
    application_api_version: str | None = None


@dataclass(frozen=True)
class RoundOutcome:
    """How a round ended.

    ``result`` is the final result (never ``PENDING``). ``saved`` is true when someone else
    (the operator) already stored the full result under the request's round id, so the
    service must not overwrite it. ``external_ref`` is the driver's round id or the
    DataSample's name.
    """

    result: DataSampleResult
    external_ref: str | None = None
    saved: bool = False
    holds_gate: bool = False
    #: The records, fetched one subtask at a time while they are saved, instead of
    #: ``result.samples`` (which is then empty); may raise
    #: :class:`~sparkglass.runtime.contract.result_caps.ResultRejected`.
    samples: Iterator[SubtaskSamples] | None = None


class RoundRefused(Exception):
    """The request of a narrowed round does not fit its vertex, as the executor's check
    found before the round started. ``field`` is the query parameter at fault (``kind``,
    ``filter``, ``columns``, ``expectation``; None when the checker did not say which); the
    message says why, in the checker's words."""

    def __init__(self, field: str | None, message: str) -> None:
        super().__init__(message)
        self.field = field


class RoundExecutor(Protocol):
    """Runs one sampling round to its end (blocking; called on a worker thread)."""

    def run(self, request: RoundRequest) -> RoundOutcome:
        """Run the round; never raises for round failures (they become ``FAILED``)."""
        ...

    def check(self, request: RoundRequest) -> None:
        """Before a narrowed round starts (blocking, on the polling request's thread): ask
        whatever would run ``request`` whether it takes it, starting nothing. Raises
        :class:`RoundRefused` only when the request itself is refused; any other trouble
        (no answer, an error) returns, so the round starts and records it."""
        ...


def failed(code: ErrorCode, round_id: str | None = None) -> DataSampleResult:
    """A ``FAILED`` result with ``code``, ended now."""
    return DataSampleResult(
        status=SampleStatus.FAILED, error_code=code, round_id=round_id, end_timestamp=now_ms()
    )
