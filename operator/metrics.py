"""Prometheus metrics of the operator process (served on ``--metrics-port``).

Labels are bounded sets only (a kind, a verb, a resource, an HTTP status code, a state):
never an object's name or namespace, which would make one series per object.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterator
from typing import Protocol

from prometheus_client import REGISTRY, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

RECONCILES = Counter(
    "sparkglass_operator_reconciles_total",
    "Reconcile passes by resource kind and outcome (ok, error).",
    ["kind", "outcome"],
)
APPLICATION_TRANSITIONS = Counter(
    "sparkglass_operator_application_transitions_total",
    "SparkApplication state transitions, by the state entered.",
    ["state"],
)
DRIVER_PODS_CREATED = Counter(
    "sparkglass_operator_driver_pods_created_total", "Driver Pods created (restarts included)."
)
SAMPLES_FINISHED = Counter(
    "sparkglass_operator_datasamples_finished_total",
    "DataSamples that reached a final phase, by phase.",
    ["phase"],
)
SAMPLE_RETRIES = Counter(
    "sparkglass_operator_datasample_retries_total",
    "Transient DataSample failures retried, by reason.",
    ["reason"],
)
ROUND_SECONDS = Histogram(
    "sparkglass_operator_round_seconds",
    "Seconds from opening a round on the driver to its final result.",
    buckets=(0.5, 1, 2, 3, 5, 10, 20, 30, 60, 120),
)
PICKUP_SECONDS = Histogram(
    "sparkglass_operator_datasample_pickup_seconds",
    "Seconds from a DataSample's creationTimestamp to the operator's first status write. "
    "creationTimestamp has whole-second resolution, so values are within one second.",
    buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60),
)
ROUND_START_SECONDS = Histogram(
    "sparkglass_operator_round_start_seconds",
    "Seconds from a DataSample's creationTimestamp to its round opened on the driver "
    "(includes any wait for the application to start).",
    buckets=(0.25, 0.5, 1, 2, 5, 10, 30, 60, 300),
)
API_REQUESTS = Counter(
    "sparkglass_operator_api_requests_total",
    "Kubernetes API requests the operator's own client made (kopf's watch streams and "
    "Event posts not included), by verb, resource (``resource/subresource``) and the HTTP "
    "status code answered (0: no answer). Each attempt counts: a 429 retried is two.",
    ["verb", "resource", "code"],
)
API_REQUEST_SECONDS = Histogram(
    "sparkglass_operator_api_request_seconds",
    "Seconds one Kubernetes API request took, from sending it to its answer (its wait in "
    "the client-side rate limit not included), by verb.",
    ["verb"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
API_RATE_LIMIT_WAIT_SECONDS = Histogram(
    "sparkglass_operator_api_rate_limit_wait_seconds",
    "Seconds a Kubernetes API request waited for the client-side rate limit (--api-qps, "
    "--api-burst) before it was sent. Long waits: the limit, not the API server, is the "
    "bottleneck.",
    buckets=(0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
SUBMISSION_SECONDS = Histogram(
    "sparkglass_operator_submission_seconds",
    "Seconds from a SparkApplication's creationTimestamp to its first driver Pod seen "
    "running (the first run only; re-runs are not submissions). Includes the operator's "
    "queueing, any quota or throttling wait, scheduling and the image pull. "
    "creationTimestamp has whole-second resolution.",
    buckets=(1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600),
)


class QueueState(Protocol):
    """What a work queue reports for the metrics (:class:`.work_queue.WorkQueue`)."""

    name: str

    def backlog(self, now: float) -> tuple[int, int, float]: ...


#: The live work queues; a queue that is garbage collected drops out by itself.
_QUEUES: weakref.WeakSet[QueueState] = weakref.WeakSet()


def track_queue(queue: QueueState) -> None:
    """Report ``queue``'s depth and age on every scrape, under its ``name``."""
    _QUEUES.add(queue)


class _QueueCollector(Collector):
    """Read at scrape time, so a queue costs nothing between scrapes. Queues of one name
    (tests run several operators in one process) are summed, their ages maxed."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        depth = GaugeMetricFamily(
            "sparkglass_operator_workqueue_depth",
            "Keys due for a pass and waiting for a free worker, by queue.",
            labels=["queue"],
        )
        delayed = GaugeMetricFamily(
            "sparkglass_operator_workqueue_delayed",
            "Keys waiting for a pass at a later time (a poll, a retry, a TTL), by queue.",
            labels=["queue"],
        )
        oldest = GaugeMetricFamily(
            "sparkglass_operator_workqueue_oldest_seconds",
            "Seconds the longest-waiting due key has been due without a worker taking it "
            "(0: none waits), by queue.",
            labels=["queue"],
        )
        now = time.monotonic()
        totals: dict[str, list[float]] = {}
        for queue in list(_QUEUES):
            due, later, age = queue.backlog(now)
            total = totals.setdefault(queue.name, [0, 0, 0.0])
            total[0] += due
            total[1] += later
            total[2] = max(total[2], age)
        for name, (ready, waiting, longest) in sorted(totals.items()):
            depth.add_metric([name], ready)
            delayed.add_metric([name], waiting)
            oldest.add_metric([name], longest)
        yield depth
        yield delayed
        yield oldest


REGISTRY.register(_QueueCollector())
