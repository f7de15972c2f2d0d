"""The ``DataSample`` custom resource: one sampling round at one vertex, as a one-shot object.

Like the Flink operator's FlinkStateSnapshot: the operator opens the round on the driver's
control endpoint, writes the counters and a byte-bounded sample into ``status``, and stores the
full result in the sparkglass service (``status.resultsURL``). The models parse stored objects
(operator, admission webhook, service) and generate ``crds/datasample.yaml`` (``make crds``).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from sparkglass.runtime.contract.errors import InvalidParameterError
from sparkglass.runtime.contract.round_request import (
    MAX_COLUMN_NAME_LENGTH,
    MAX_COLUMNS,
    MAX_FILTER_LENGTH,
    RoundKind,
    RoundRequest,
    round_request,
)
from sparkglass.runtime.contract.sample_result import DataSampleResult

from .fields import (
    DNS1123_LABEL_PATTERN,
    DNS1123_SUBDOMAIN_PATTERN,
    Conditions,
    Duration,
    DurationRange,
    Int32,
    Int64,
    Metadata,
)
from .schema import CustomResource, PrinterColumn, ResourceModel, Rule, Schema, rules


def _result_doc(field: str) -> str:
    """The REST body's description of ``field`` (:class:`DataSampleResult`)."""
    return DataSampleResult.model_fields[field].description or ""


GROUP = "sparkglass.io"
VERSION = "v1alpha1"
#: ``spec.applicationRef.apiVersion`` values: sparkglass's own SparkApplication (the default),
#: the Kubeflow spark-operator's and the Apache Spark Kubernetes operator's. All three kinds
#: are ``SparkApplication``.
SPARKGLASS_API_VERSION = f"{GROUP}/{VERSION}"
KUBEFLOW_API_VERSION = "sparkoperator.k8s.io/v1beta2"
APACHE_SPARK_API_VERSION = "spark.apache.org/v1"
#: Suffix of the control Secret (and of the certificate's Service name) the operator makes
#: for another operator's application (Kubeflow's or Apache Spark's).
KUBEFLOW_SECRET_SUFFIX = "-sparkglass-control"
#: Longest name of another operator's application: ``<name>-sparkglass-control`` is a
#: 63-character DNS-1123 label.
KUBEFLOW_MAX_NAME_LENGTH = 63 - len(KUBEFLOW_SECRET_SUFFIX)
#: Suffix of the ConfigMap in which the operator publishes the pipeline description of
#: another operator's application, as its verified driver serves it (``GET /api/v1/pipeline``),
#: for the service to list the application's vertices; the key holding it, as compact JSON;
#: and the most bytes of that JSON either side writes or reads.
FOREIGN_PIPELINE_SUFFIX = "-sparkglass-pipeline"
FOREIGN_PIPELINE_KEY = "pipeline.json"
MAX_FOREIGN_PIPELINE_BYTES = 256 * 1024
#: Longest ``applicationStartTimeout``, seconds.
MAX_START_TIMEOUT_SECONDS = 3600.0
#: Hard cap of records in one response (and so in one DataSample).
MAX_RECORDS = 5000
#: Longest ``status.message``: writers cut theirs to it.
MAX_MESSAGE_LENGTH = 4096


class ApplicationApiVersion(StrEnum):
    SPARKGLASS = SPARKGLASS_API_VERSION
    KUBEFLOW = KUBEFLOW_API_VERSION
    APACHE_SPARK = APACHE_SPARK_API_VERSION


class ApplicationKind(StrEnum):
    SPARK_APPLICATION = "SparkApplication"


def _allowed(value: Any, allowed: type[StrEnum], field: str) -> Any:
    # Checked before pydantic's enum check so that the message names the field and the
    # allowed values (pydantic's names neither the field nor, for a DataSample, the path).
    if isinstance(value, str) and value not in {m.value for m in allowed}:
        raise InvalidParameterError(
            f"{field}={value!r} is not supported: allowed " + ", ".join(m.value for m in allowed),
            field=field,
        )
    return value


class ApplicationRef(ResourceModel):
    """The application to sample, always in this DataSample's namespace (there is no
    namespace field). By default sparkglass's own SparkApplication (apiVersion
    sparkglass.io/v1alpha1). With apiVersion sparkoperator.k8s.io/v1beta2, a Kubeflow
    spark-operator SparkApplication: the operator waits until its state is RUNNING, then talks
    to the driver Pod labelled spark-role=driver and sparkoperator.k8s.io/app-name=<name> that
    the application owns (controller owner reference to its uid), at that Pod's IP and its
    container port named sg-control, with the token and certificate of the Secret
    <name>-sparkglass-control the operator created for it (docs/pipelines.md, "Kubeflow
    spark-operator applications"). With apiVersion spark.apache.org/v1, an Apache Spark
    Kubernetes operator SparkApplication, the same way: the operator waits until its
    status.currentState.currentStateSummary says the driver started, then talks to the driver
    Pod labelled spark-role=driver and spark.operator/spark-app-name=<name> that has an owner
    reference to its uid (docs/pipelines.md, "Apache Spark Kubernetes operator
    applications")."""

    model_config = ResourceModel.model_config | {
        "json_schema_extra": rules(
            Rule(
                "(!has(self.kind) || self.kind == 'SparkApplication') && (!has(self.apiVersion)"
                f" || self.apiVersion == '{SPARKGLASS_API_VERSION}' ||"
                f" self.apiVersion == '{KUBEFLOW_API_VERSION}' ||"
                f" self.apiVersion == '{APACHE_SPARK_API_VERSION}')",
                "applicationRef must name a SparkApplication of apiVersion "
                f"{SPARKGLASS_API_VERSION}, {KUBEFLOW_API_VERSION} or {APACHE_SPARK_API_VERSION}",
            ),
            Rule(
                f"!has(self.apiVersion) || self.apiVersion == '{SPARKGLASS_API_VERSION}' || "
                f"(size(self.name) <= {KUBEFLOW_MAX_NAME_LENGTH} && "
                f"self.name.matches('{DNS1123_LABEL_PATTERN}'))",
                "a Kubeflow or Apache Spark operator application's name must be a DNS-1123 "
                f"label of at most {KUBEFLOW_MAX_NAME_LENGTH} characters (its Secret "
                "<name>-sparkglass-control is a 63-character label)",
            ),
        )
    }

    api_version: ApplicationApiVersion = ApplicationApiVersion.SPARKGLASS
    """API version of the application: sparkglass.io/v1alpha1 (default, sparkglass's own
    SparkApplication), sparkoperator.k8s.io/v1beta2 (a Kubeflow spark-operator
    SparkApplication; needs the chart value kubeflow.enabled=true, which lets the operator read
    them) or spark.apache.org/v1 (an Apache Spark Kubernetes operator SparkApplication; needs
    the chart value apacheSparkOperator.enabled=true)."""
    kind: ApplicationKind = ApplicationKind.SPARK_APPLICATION
    """Kind of the application; SparkApplication for every API version."""
    name: Annotated[
        str, Field(min_length=1, max_length=253), Schema(pattern=DNS1123_SUBDOMAIN_PATTERN)
    ]
    """Name of the application in this namespace. A Kubeflow or Apache Spark operator
    application's name must be a DNS-1123 label of at most 44 characters (its Secret and
    certificate name <name>-sparkglass-control is a 63-character label)."""

    @model_validator(mode="before")
    @classmethod
    def _check(cls, data: Any) -> Any:
        # There is no ``namespace``: the API server prunes one; one that reaches a reader
        # anyway (an API server that does not prune, a restored backup) is refused rather
        # than ignored, so that nobody believes they sampled another namespace's application.
        if isinstance(data, dict):
            if data.get("namespace") is not None:
                raise InvalidParameterError(
                    "applicationRef.namespace is not supported: a DataSample samples an "
                    "application in its own namespace",
                    field="applicationRef.namespace",
                )
            _allowed(data.get("apiVersion"), ApplicationApiVersion, "applicationRef.apiVersion")
            _allowed(data.get("kind"), ApplicationKind, "applicationRef.kind")
        return data

    @property
    def is_kubeflow(self) -> bool:
        """Whether this names a Kubeflow spark-operator SparkApplication."""
        return self.api_version is ApplicationApiVersion.KUBEFLOW

    @property
    def is_foreign(self) -> bool:
        """Whether this names another operator's SparkApplication (Kubeflow's or Apache
        Spark's), whose driver Pod that operator creates."""
        return self.api_version is not ApplicationApiVersion.SPARKGLASS


class DataSampleSpec(ResourceModel):
    """What to sample. Immutable: a DataSample is one round; create a new one to sample
    again."""

    model_config = ResourceModel.model_config | {
        "json_schema_extra": rules(
            Rule(
                "self == oldSelf",
                "a DataSample spec is immutable; create a new DataSample to sample again",
            ),
            Rule(
                "!has(self.expectation) || (has(self.kind) && self.kind == 'violations')",
                "spec.expectation needs spec.kind violations",
            ),
        )
    }

    application_ref: ApplicationRef
    vertex: Annotated[
        str, Field(min_length=1, max_length=63), Schema(pattern=DNS1123_LABEL_PATTERN)
    ]
    """Name of the vertex (pipeline step) whose output is sampled: a DNS-1123 label listed in
    the application's spec.pipeline.vertices."""
    subtask_index: Annotated[Int32, Field(ge=0, le=100000)] | None = None
    """Keep only the records of this subtask (Spark partition index). Unset: all subtasks."""
    max_records: Annotated[Int32, Field(ge=1, le=MAX_RECORDS)] = 100
    """Most records to keep in the result (1-5000; 5000 is the hard cap of one response)."""
    # The operator checks it against the application's own window when the round opens.
    sampling_window: (
        Annotated[Duration, DurationRange("1s", "30s", "samplingWindow", on_parse=False)] | None
    ) = None
    """How long the taps capture records, as a duration such as 3s, 1500ms or 1s500ms (units
    ms, s, m, h; 1s-30s). Unset: the application's spark.sparkglass.sampling.sampling-window."""
    ttl_seconds_after_finished: Annotated[Int64, Field(ge=0, le=31536000)] | None = None
    """Delete this DataSample this many seconds after it finished (any final phase). Unset:
    the operator's default (option --default-ttl-seconds-after-finished, chart value
    operator.defaultTTLSecondsAfterFinished; 3600 unless changed). No schema default, so the
    operator's applies. The full result stays in the service."""
    backoff_limit: Annotated[Int32, Field(ge=0, le=10)] = 3
    """How many times a transient failure (driver unreachable, too many concurrent rounds, the
    application not found) is retried, with exponential back-off from 1 s, before the phase
    becomes Failed. An application that is still starting spends no retries: see
    applicationStartTimeout."""
    kind: RoundKind = RoundKind.OUTPUT
    """Which rows: output (the step's output, default), violations (rows that failed an
    expectation of the step, each with the expectation names) or errors: error rows, the rows a
    vertex could not process, each with why (corrupt CSV/JSON records of a source, async
    requests that still failed after their retries with on_failure=emit_error, rows a Python
    vertex failed on with on_error=emit_error)."""
    filter: Annotated[str, Field(min_length=1, max_length=MAX_FILTER_LENGTH)] | None = None
    """Spark SQL predicate over the step's columns (e.g. carrier = 'UA' AND dep_delay > 60),
    evaluated on the executors before the rate limit, which then spreads over the matching
    rows; it may not name a redacted column. A bad one ends the DataSample Failed naming the
    column or the parse error."""
    columns: (
        Annotated[
            list[
                Annotated[
                    str,
                    Field(min_length=1, max_length=MAX_COLUMN_NAME_LENGTH),
                    Schema(pattern="^[^,`]+$", description="A column name."),
                ]
            ],
            Field(min_length=1, max_length=MAX_COLUMNS),
        ]
        | None
    ) = None
    """Only these columns, in this order (after redaction)."""
    expectation: (
        Annotated[str, Field(min_length=1, max_length=63), Schema(pattern=DNS1123_LABEL_PATTERN)]
        | None
    ) = None
    """With kind violations, only rows that failed this expectation."""
    application_start_timeout: Annotated[
        Duration, DurationRange("0s", "1h", "applicationStartTimeout")
    ] = "5m"
    """How long, from the DataSample's creation, to wait for an application that is still
    starting (SUBMITTED, PENDING_RERUN, or its driver Pod not running yet; for a Kubeflow
    application any state but RUNNING and its end states COMPLETED, FAILED, SUBMISSION_FAILED,
    or no Running driver Pod it owns; for an Apache Spark operator application any state before
    its driver started and the stopping ones, but not ResourceReleased or
    TerminatedWithoutReleaseResources) before the phase becomes Abandoned (reason
    ApplicationNotRunning). While waiting the phase stays Pending with Ready reason
    WaitingForApplication. A duration such as 30s or 5m (0s-1h)."""

    def round_request(self) -> RoundRequest:
        """The round's kind, filter, columns and expectation; raises
        :class:`~sparkglass.runtime.contract.errors.InvalidParameterError` naming the field."""
        return round_request(self.kind.value, self.filter, self.columns, self.expectation)

    @classmethod
    def parse(cls, spec: Any) -> DataSampleSpec:
        """Parse a stored spec dict; raises ``pydantic.ValidationError`` naming the field."""
        return cls.model_validate(dict(spec or {}))


class Phase(StrEnum):
    """Where a DataSample is, or how it ended."""

    PENDING = "Pending"
    IN_PROGRESS = "InProgress"
    COMPLETE = "Complete"
    PARTIAL = "Partial"
    NO_DATA = "NoData"
    FAILED = "Failed"
    DISABLED = "Disabled"
    ABANDONED = "Abandoned"


class SampledRecord(ResourceModel):
    """One captured record."""

    sample_timestamp: Int64 | None = None
    """When the row was captured, ms since the epoch."""
    data: str | None = None
    """The row as Spark's to_json(struct(*)), cut to the application's maxRecordLength."""
    data_type: str | None = None
    """The row's Spark type, e.g. struct<carrier:string,n:bigint>."""
    truncated: bool | None = None
    """True when data was cut."""
    expectations: list[Annotated[str, Schema(description="An expectation name.")]] | None = None
    """Rounds of kind violations, the expectations the row failed."""
    error: str | None = None
    """Rounds of kind errors, why the step could not process the row."""


class SubtaskRecords(ResourceModel):
    """The records of one subtask."""

    subtask_index: Annotated[Int32, Field(ge=0)]
    """The subtask (Spark partition index)."""
    records: Annotated[list[SampledRecord], Field(max_length=MAX_RECORDS)] | None = None
    """Records captured at the vertex output by this subtask."""


class DataSampleStatus(ResourceModel):
    """What the operator observed; written only by the operator."""

    phase: Phase | None = None
    """Pending (accepted, round not opened), InProgress (round open on the driver), Complete
    (every subtask answered), Partial (some subtasks failed; see failedSubtasks), NoData (no
    record passed in the window), Failed (see errorCode and message), Disabled (sampling is off
    for the application), Abandoned (the application is not running)."""
    message: Annotated[str, Field(max_length=MAX_MESSAGE_LENGTH)] | None = None
    """Human-readable detail of the phase (why it failed, what is awaited)."""
    round_id: Annotated[str, Field(max_length=128)] | None = None
    """Identifier of the round on the driver (set once the round opened). Output only: the
    operator reads the round its driver opened for this DataSample's uid, never one written
    here."""
    results_url: Annotated[str, Field(max_length=2048)] | None = Field(
        default=None, alias="resultsURL"
    )
    """Where the sparkglass service serves the full result (the status holds at most a
    byte-bounded part of it)."""
    start_time: Annotated[str, Schema(format="date-time")] | None = None
    """When the operator opened the round (RFC 3339)."""
    completion_time: Annotated[str, Schema(format="date-time")] | None = None
    """When the DataSample reached a final phase (RFC 3339). Output only: the TTL counts from
    the operator's own record of it, so changing this keeps nothing longer."""
    end_timestamp: Int64 | None = None
    """When the round ended on the driver, milliseconds since the epoch."""
    total_record_count: Annotated[Int64, Field(ge=0)] | None = None
    """Records in the result (after maxRecords and the 5000 cap)."""
    # The counters mean what they mean in the REST body: one description, the contract's.
    total_truncated: bool | None = Field(default=None, description=_result_doc("total_truncated"))
    dropped_by_contention: Annotated[Int64, Field(ge=0)] | None = Field(
        default=None, description=_result_doc("dropped_by_contention")
    )
    dropped_by_rate_limit: Annotated[Int64, Field(ge=0)] | None = Field(
        default=None, description=_result_doc("dropped_by_rate_limit")
    )
    error_code: (
        Literal[
            "TIMEOUT",
            "EXECUTOR_UNREACHABLE",
            "TOO_MANY_CONCURRENT_ROUNDS",
            "TASK_TERMINATED",
            "INTERNAL_ERROR",
        ]
        | None
    ) = None
    """Why the round is Failed or Partial."""
    no_data_reason: Literal["NO_MICRO_BATCH", "NO_ROWS", "QUERY_NOT_ACTIVE"] | None = None
    """Why a NoData round saw no row: NO_MICRO_BATCH (the streaming query ran no micro-batch
    during the round), NO_ROWS (micro-batches ran and the vertex emitted nothing) or
    QUERY_NOT_ACTIVE."""
    last_micro_batch_timestamp: Int64 | None = None
    """When the last micro-batch of the vertex's streaming queries ended, milliseconds since
    the epoch."""
    materialized_at: Int64 | None = None
    """Set when the records are an end-of-input vertex's materialized output, each row at most
    once: when it was written, milliseconds since the epoch."""
    failed_subtasks: (
        Annotated[
            list[Annotated[Int32, Schema(description="A subtask (partition) index.")]],
            Field(max_length=10000),
        ]
        | None
    ) = None
    """Subtasks (partition indexes) that did not answer."""
    filter_stopped_subtasks: (
        Annotated[
            list[Annotated[Int32, Schema(description="A subtask (partition) index.")]],
            Field(max_length=10000),
        ]
        | None
    ) = None
    """Subtasks where spec.filter used up its CPU budget (the application's
    spark.sparkglass.sampling.tostring-budget-ms for each second of the round) and was stopped
    there for the rest of the round, so that it could not hold the job's tasks: fewer rows were
    looked at there than the window let through. Absent when none."""
    records_in_status: Annotated[Int32, Field(ge=0)] | None = None
    """Records kept in status.samples (bounded by the operator's byte cap)."""
    samples_truncated: bool | None = None
    """True when status.samples holds fewer records than the result because of the byte cap;
    the full result is at resultsURL."""
    samples: Annotated[list[SubtaskRecords], Field(max_length=10000)] | None = None
    """The sampled records grouped by subtask, bounded in bytes."""
    retries: Annotated[Int32, Field(ge=0)] | None = None
    """Transient failures retried so far (at most spec.backoffLimit)."""
    next_attempt_time: Annotated[str, Schema(format="date-time")] | None = None
    """Earliest time of the next attempt after a transient failure."""
    observed_generation: Int64 | None = None
    """The metadata.generation this status describes."""
    conditions: Conditions | None = None
    """Standard conditions. Ready is True once the DataSample did what its spec asks: a result
    (Complete, Partial, NoData) or sampling off for the application (Disabled); False when it
    failed or was abandoned."""


class DataSample(ResourceModel):
    """DataSample takes one sample of the records leaving a vertex of a running
    SparkApplication. It is one-shot: create a new DataSample for a new sample."""

    api_version: str | None = None
    """APIVersion of this object (sparkglass.io/v1alpha1)."""
    kind: str | None = None
    """Kind of this object (DataSample)."""
    metadata: Metadata | None = None
    spec: DataSampleSpec
    status: DataSampleStatus | None = None


RESOURCE = CustomResource(
    group=GROUP,
    version=VERSION,
    kind="DataSample",
    plural="datasamples",
    singular="datasample",
    model=DataSample,
    short_names=("dsample",),
    categories=("sparkglass",),
    labels={"app.kubernetes.io/name": "sparkglass", "app.kubernetes.io/component": "crd"},
    columns=(
        PrinterColumn(
            "Application", "string", ".spec.applicationRef.name", "The application sampled."
        ),
        PrinterColumn("Vertex", "string", ".spec.vertex", "The vertex whose output is sampled."),
        PrinterColumn("Phase", "string", ".status.phase", "Where the round is, or how it ended."),
        PrinterColumn(
            "Records",
            "integer",
            ".status.totalRecordCount",
            "Records the round captured (the status may hold fewer).",
        ),
        PrinterColumn("Age", "date", ".metadata.creationTimestamp"),
    ),
    comment=(
        "DataSample: one sampling round at one vertex of a running SparkApplication, as a "
        "one-shot resource (like the Flink operator's FlinkStateSnapshot). The operator opens "
        "the round on the driver's control endpoint, writes the counters and a byte-bounded "
        "sample into status, and stores the full result in the sparkglass service "
        "(status.resultsURL)."
    ),
)
