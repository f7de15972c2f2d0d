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
