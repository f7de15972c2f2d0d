"""Prometheus metrics of the operator process (served on ``--metrics-port``)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

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
    "Event posts not included), by verb and resource (``resource/subresource``).",
    ["verb", "resource"],
)
