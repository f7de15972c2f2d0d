"""The operator's view of the two custom resources' specs.

The schema is the models' in :mod:`sparkglass.crds` (the one source of the CRDs, their
defaults, bounds and rules); this module adds only the operator's policy, which needs facts the
CRD does not know: ``spec.volumes`` and the Pod settings may not collide with the volumes,
mounts, variables and containers the operator adds to the Pods (:mod:`.pod_customization`).
It re-exports what the operator's modules read, so they import from one place.
"""

from __future__ import annotations

from pydantic import ValidationInfo, field_validator

from sparkglass.crds import sparkapplication as _crd
from sparkglass.crds.datasample import (
    KUBEFLOW_API_VERSION,
    MAX_START_TIMEOUT_SECONDS,
    SPARKGLASS_API_VERSION,
    ApplicationApiVersion,
    ApplicationKind,
    ApplicationRef,
    DataSampleSpec,
)
from sparkglass.crds.fields import parse_duration
from sparkglass.crds.sparkapplication import (
    DEFAULT_DRIVER_START_TIMEOUT_SECONDS,
    MAX_DRIVER_START_TIMEOUT_SECONDS,
    MIN_DRIVER_START_TIMEOUT_SECONDS,
    OPERATOR_OWNED_CONF_KEYS,
    OPERATOR_OWNED_CONF_PREFIXES,
    USER_CONTROL_CONF_KEYS,
    Dependencies,
    DriverSettings,
    DynamicAllocation,
    EnvVar,
    ExecutorSettings,
    ExpectationSpec,
    KubernetesObject,
    PipelineSpec,
    PodSettings,
    RestartPolicy,
    RestartType,
    SamplingSpec,
    SparkUIOptions,
    VertexSpec,
    operator_owned,
)
from sparkglass.runtime.contract.description import IdempotentAttribute

from .pod_customization import check_pod_settings, check_volumes


class SparkApplicationSpec(_crd.SparkApplicationSpec):
    """``SparkApplication.spec`` as the operator accepts it: the CRD's, and no user volume,
    mount, variable or container that would replace one of the operator's."""

    @field_validator("volumes")
    @classmethod
    def _no_reserved_volume(cls, value: list[KubernetesObject]) -> list[KubernetesObject]:
        check_volumes(value)
        return value

    @field_validator("driver", "executor")
    @classmethod
    def _no_collision(cls, value: PodSettings, info: ValidationInfo) -> PodSettings:
        # ``volumes`` is declared before ``driver``/``executor``, so it is in ``info.data``.
        check_pod_settings(value, info.data.get("volumes") or [], role=info.field_name or "")
        return value


__all__ = [
    "DEFAULT_DRIVER_START_TIMEOUT_SECONDS",
    "KUBEFLOW_API_VERSION",
    "MAX_DRIVER_START_TIMEOUT_SECONDS",
    "MAX_START_TIMEOUT_SECONDS",
    "MIN_DRIVER_START_TIMEOUT_SECONDS",
    "OPERATOR_OWNED_CONF_KEYS",
    "OPERATOR_OWNED_CONF_PREFIXES",
    "SPARKGLASS_API_VERSION",
    "USER_CONTROL_CONF_KEYS",
    "ApplicationApiVersion",
    "ApplicationKind",
    "ApplicationRef",
    "DataSampleSpec",
    "Dependencies",
    "DriverSettings",
    "DynamicAllocation",
    "EnvVar",
    "ExecutorSettings",
    "ExpectationSpec",
    "IdempotentAttribute",
    "KubernetesObject",
    "PipelineSpec",
    "PodSettings",
    "RestartPolicy",
    "RestartType",
    "SamplingSpec",
    "SparkApplicationSpec",
    "SparkUIOptions",
    "VertexSpec",
    "operator_owned",
    "parse_duration",
]
