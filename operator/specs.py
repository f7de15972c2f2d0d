"""Typed views of the two custom resources' specs (``sparkglass.io/v1alpha1``).

The CRDs in ``crds/`` are the contract; these models read a spec dict as the API server
stores it (camelCase keys) and apply the same defaults as the CRDs, because the operator must
also work where the server does no defaulting (the loopback emulator in tests, or an object
written before a default was added); ``tests/operator/test_units.py`` checks every default and
bound restated here against ``crds/*.yaml``. Durations are checked with the CRDs' own grammar
(:mod:`sparkglass.runtime.contract.durations`). Unknown keys are ignored so a newer CRD never
breaks an older operator.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo
from pydantic.alias_generators import to_camel

from sparkglass.runtime.contract.description import (
    IdempotentAttribute,
    PipelineDescription,
    VertexAttributes,
    VertexDescription,
    VertexKind,
)
from sparkglass.runtime.contract.durations import parse_duration_ms


def parse_duration(text: str, *, field: str = "duration") -> float:
    """Seconds (float) in a duration of the one grammar (``3s``, ``1500ms``, ``1m30s``).

    The grammar is :mod:`sparkglass.runtime.contract.durations`; this wrapper exists because
    the operator's deadlines are in seconds. Raises
    :class:`~sparkglass.runtime.contract.errors.SamplingSettingsError` (a ``ValueError``)
    naming ``field`` when ``text`` is not such a duration.
    """
    return parse_duration_ms(text, field=field) / 1000


def _duration(value: str, info: ValidationInfo) -> str:
    # Checked on parse, so a malformed duration fails the spec (InvalidSpec) where the API
    # server did not check it, instead of failing later in the driver.
    parse_duration(value, field=to_camel(info.field_name or "duration"))
    return value


#: A duration kept as the string the user wrote (Spark reads it as such), checked on parse.
Duration = Annotated[str, AfterValidator(_duration)]


class _Spec(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


class EnvVar(_Spec):
    """One environment variable (name/value)."""

    name: str
    value: str = ""


class PodSettings(_Spec):
    """``spec.driver`` / ``spec.executor`` (spark-operator v1beta2 ``SparkPodSpec`` subset)."""

    cores: int | None = None
    core_limit: str | None = None
    memory: str | None = None
    memory_overhead: str | None = None
    image: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    env: list[EnvVar] = Field(default_factory=list)
    service_account: str | None = None
    node_selector: dict[str, str] = Field(default_factory=dict)
    instances: int | None = None  # executors only


class Dependencies(_Spec):
    """``spec.deps``."""

    jars: list[str] = Field(default_factory=list)
    files: list[str] = Field(default_factory=list)
    py_files: list[str] = Field(default_factory=list)
    packages: list[str] = Field(default_factory=list)
    repositories: list[str] = Field(default_factory=list)
    exclude_packages: list[str] = Field(default_factory=list)


class DynamicAllocation(_Spec):
    """``spec.dynamicAllocation``."""

    enabled: bool = False
    initial_executors: int | None = None
    min_executors: int | None = None
    max_executors: int | None = None
    shuffle_tracking_timeout: int | None = None  # ms


class RestartType(StrEnum):
    NEVER = "Never"
    ALWAYS = "Always"
    ON_FAILURE = "OnFailure"


class RestartPolicy(_Spec):
    """``spec.restartPolicy``; intervals in seconds."""

    type: RestartType = RestartType.NEVER
    on_failure_retries: int | None = None
    on_failure_retry_interval: int = 5
    on_submission_failure_retries: int | None = None
    on_submission_failure_retry_interval: int = 5


class VertexSpec(_Spec):
    """One entry of ``spec.pipeline.vertices``."""

    name: str
    kind: VertexKind = VertexKind.VERTEX
    inputs: list[str] = Field(default_factory=list)
    bounded: bool = True
    python: bool = False
    attributes: VertexAttributes = Field(default_factory=VertexAttributes)


class PipelineSpec(_Spec):
    """``spec.pipeline``."""

    name: str | None = None
    vertices: list[VertexSpec] = Field(default_factory=list)


class SamplingSpec(_Spec):
    """``spec.sampling``; durations stay strings (Spark reads them as such)."""

    enabled: bool = False
    max_sample_rate: int = 100
    max_record_length: int = 10000
    sampling_window: Duration = "3s"
    refresh_interval: Duration = "60s"
    timeout: Duration = "30s"
    control_port: int = 4045


class SparkApplicationSpec(_Spec):
    """``SparkApplication.spec``."""

    type: str = "Python"
    mode: str = "client"
    spark_version: str | None = None
    image: str
    image_pull_policy: str | None = None
    image_pull_secrets: list[str] = Field(default_factory=list)
    main_application_file: str
    main_class: str | None = None
    arguments: list[str] = Field(default_factory=list)
    spark_conf: dict[str, str] = Field(default_factory=dict)
    deps: Dependencies = Field(default_factory=Dependencies)
    driver: PodSettings = Field(default_factory=PodSettings)
    executor: PodSettings = Field(default_factory=PodSettings)
    dynamic_allocation: DynamicAllocation = Field(default_factory=DynamicAllocation)
    restart_policy: RestartPolicy = Field(default_factory=RestartPolicy)
    time_to_live_seconds: int | None = None
    pipeline: PipelineSpec = Field(default_factory=PipelineSpec)
    sampling: SamplingSpec = Field(default_factory=SamplingSpec)

    @classmethod
    def parse(cls, spec: Any) -> SparkApplicationSpec:
        """Parse a stored spec dict; raises ``pydantic.ValidationError`` naming the field."""
        return cls.model_validate(dict(spec or {}))

    def pipeline_description(self, app_name: str) -> PipelineDescription:
        """The declared pipeline as the runtime's :class:`PipelineDescription` (unchecked)."""
        return PipelineDescription(
            name=self.pipeline.name or app_name,
            vertices=[
                VertexDescription(
                    name=v.name,
                    kind=v.kind,
                    inputs=list(v.inputs),
                    bounded=v.bounded,
                    python=v.python,
                    attributes=v.attributes,
                )
                for v in self.pipeline.vertices
            ],
        )


class ApplicationRef(_Spec):
    name: str


class DataSampleSpec(_Spec):
    """``DataSample.spec``."""

    application_ref: ApplicationRef
    vertex: str
    subtask_index: int | None = None
    max_records: int = Field(default=100, ge=1, le=5000)
    sampling_window: Duration | None = None
    ttl_seconds_after_finished: int | None = Field(default=None, ge=0)
    backoff_limit: int = Field(default=3, ge=0, le=10)

    @classmethod
    def parse(cls, spec: Any) -> DataSampleSpec:
        """Parse a stored spec dict; raises ``pydantic.ValidationError`` naming the field."""
        return cls.model_validate(dict(spec or {}))


__all__ = [
    "DataSampleSpec",
    "IdempotentAttribute",
    "RestartPolicy",
    "RestartType",
    "SamplingSpec",
    "SparkApplicationSpec",
    "parse_duration",
]
