"""Does a DataSample fit its application? The one answer, for both kinds of application.

The admission webhook (:mod:`.admission`, at ``kubectl apply``) and the DataSample reconciler
(:mod:`.datasample`, before it looks for the driver) both call :func:`check`, for sparkglass's
own SparkApplication and for another operator's (:func:`foreign`: a Kubeflow spark-operator
one, ``sparkoperator.k8s.io/v1beta2``, or an Apache Spark operator one, ``spark.apache.org/v1``):
what can be told from the application's object (its spec, the vertex, the window, whether it
samples). The rest only the running driver knows, and the driver is the one place that
checks it. Each refusal is written once here, in the words of both callers (:class:`Misfit`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

from pydantic import ValidationError

from sparkglass.runtime.contract.durations import parse_duration_ms
from sparkglass.runtime.contract.errors import SamplingSettingsError

from . import apache_spark, foreign_apps, kubeflow
from .foreign_apps import ForeignApps
from .specs import ApplicationApiVersion, DataSampleSpec, SparkApplicationSpec

#: The other operators whose applications a DataSample may name, by ``applicationRef.apiVersion``.
_FOREIGN = {
    ApplicationApiVersion.KUBEFLOW: kubeflow.KUBEFLOW,
    ApplicationApiVersion.APACHE_SPARK: apache_spark.APACHE_SPARK,
}


class Reason(StrEnum):
    """The Ready condition reason of a DataSample that does not fit its application."""

    KUBEFLOW_NOT_ENABLED = "KubeflowNotEnabled"
    APACHE_SPARK_NOT_ENABLED = "ApacheSparkOperatorNotEnabled"
    INVALID_APPLICATION = "InvalidApplication"
    UNKNOWN_VERTEX = "UnknownVertex"
    INVALID_SAMPLING_WINDOW = "InvalidSamplingWindow"
    SAMPLING_DISABLED = "SamplingDisabled"


@dataclass(frozen=True)
class Misfit:
    """Why a DataSample does not fit its application, for both callers.

    * ``reason``, ``message``: the Ready reason and ``status.message`` the reconciler ends
      the DataSample with, in phase :attr:`phase`;
    * ``field``: the DataSample field at fault (``spec.vertex``...), or None when the fault
      is the application's (an invalid one, sampling off), which a DataSample cannot fix;
    * ``review``: the webhook's words: the denial (``"<field>: why"``) when :attr:`denies`,
      else the warning the DataSample is admitted with. Never a list of the application's
      vertices (the webhook cannot tell the API server from a forged caller): those are in
      the status message only, for those who may read the DataSample.
    """

    reason: Reason
    message: str
    review: str
    field: str | None = None

    @property
    def denies(self) -> bool:
        """Whether the webhook refuses the DataSample (the fault is one of its fields)."""
        return self.field is not None

    @property
    def phase(self) -> Literal["Failed", "Disabled"]:
        """The DataSample's final phase: ``Disabled`` for sampling off, else ``Failed``."""
        return "Disabled" if self.reason is Reason.SAMPLING_DISABLED else "Failed"


@dataclass(frozen=True)
class Fit:
    """A DataSample that fits its application, and what its round takes from the application.

    ``vertices``: the declared ones (empty when the application declares no pipeline, as
    every other operator's application: the driver then knows whether the vertex exists);
    ``sampling_window_ms``: the application's window (a DataSample's own is at most this);
    ``timeout_ms``: how long the driver lets a round run; ``max_record_length``: characters
    of one record the driver keeps.
    """

    vertices: tuple[str, ...]
    sampling_window_ms: int
    timeout_ms: int
    max_record_length: int


@dataclass(frozen=True)
class _Application:
    """One kind of application's sampling settings, and how its messages name them."""

    fit: Fit
    enabled: bool
    #: The window as the messages show it, and where the application sets it / enables sampling.
    window: str
    window_source: str
    disabled_because: str
    foreign: bool


def check(spec: DataSampleSpec, app: dict[str, Any]) -> Fit | Misfit:
    """Whether the DataSample ``spec`` fits ``app``, the application object its
    ``applicationRef`` names (a sparkglass ``SparkApplication`` or, with
    ``applicationRef.apiVersion: sparkoperator.k8s.io/v1beta2`` or ``spark.apache.org/v1``,
    a Kubeflow or Apache Spark operator one), as read
    from the API: ``{"metadata": ..., "spec": ...}``. Raises nothing: the first rule
    broken (in this order) is the :class:`Misfit` returned; a DataSample that breaks none
    gets the :class:`Fit` its round runs with.

    1. the application: a sparkglass one's spec parses (:class:`.specs.SparkApplicationSpec`);
       another operator's one's name can name its control Secret
       (:meth:`.foreign_apps.ForeignApps.app_name_problem`) and its ``spec.sparkConf``
       ``spark.sparkglass.sampling.*`` parse (:func:`.foreign_apps.sampling_settings`);
    2. ``spec.vertex`` is one of the application's ``spec.pipeline.vertices``, when it
       declares them (another operator's application never does);
    3. ``spec.samplingWindow`` is at most the application's window
       (``spec.sampling.samplingWindow``; ``sparkConf spark.sparkglass.sampling.sampling-window``);
    4. sampling is enabled (``spec.sampling.enabled``; ``sparkConf
       spark.sparkglass.sampling.enabled=true``), else the DataSample ends ``Disabled``.

    Another operator's application the operator may not read at all (the chart's
    ``kubeflow.enabled`` or ``apacheSparkOperator.enabled`` is off) is refused by both callers
    alike too (:func:`not_enabled`).

    The rest only the running driver knows, against the vertex's schema and its declared
    expectations: ``spec.kind``, ``filter``, ``columns``, ``expectation``, a vertex an
    application does not declare (the webhook asks its round check, the reconciler's open is
    refused), and the application's redaction (applied on the executors; no round request can
    lower it, a filter may not name a redacted column). ``maxRecords`` has no bound of the
    application's: the CRD caps it.
    """
    name = spec.application_ref.name
    other = foreign(spec)
    read = _foreign(other, name, app) if other is not None else _sparkglass(name, app)
    if isinstance(read, Misfit):
        return read
    vertices = read.fit.vertices
    if vertices and spec.vertex not in vertices:
        return Misfit(
            Reason.UNKNOWN_VERTEX,
            f"vertex {spec.vertex!r} is not in application {name!r}; "
            f"vertices: {', '.join(vertices)}",
            f"spec.vertex: vertex {spec.vertex!r} is not in application {name!r} "
            "(its spec.pipeline.vertices)",
            "spec.vertex",
        )
    window = spec.sampling_window
    if window and parse_duration_ms(window, field="samplingWindow") > read.fit.sampling_window_ms:
        exceeds, where = f"{window} exceeds the application's {read.window}", read.window_source
        # The webhook's words differ by kind only in this tail (kept as they were).
        tail = f"({where})" if read.foreign else f"(its {where}); allowed 1s–{read.window}"
        return Misfit(
            Reason.INVALID_SAMPLING_WINDOW,
            f"samplingWindow {exceeds} ({where})",
            f"spec.samplingWindow: {exceeds} {tail}",
            "spec.samplingWindow",
        )
    if not read.enabled:
        disabled = f"sampling is disabled for {name!r} ({read.disabled_because})"
        return Misfit(
            Reason.SAMPLING_DISABLED, disabled, f"{disabled}: the DataSample will end Disabled"
        )
    return read.fit


def foreign(spec: DataSampleSpec) -> ForeignApps | None:
    """The other operator whose application ``spec`` names, or None for sparkglass's own."""
    return _FOREIGN.get(spec.application_ref.api_version)


def not_enabled(apps: ForeignApps, exc: foreign_apps.NotEnabled) -> Misfit:
    """The DataSample names another operator's application and the operator may not read
    those (``apps.read_application`` raised ``exc``: the chart value that grants it is off):
    refused, naming ``spec.applicationRef``."""
    kubeflow_apps = apps is kubeflow.KUBEFLOW
    reason = Reason.KUBEFLOW_NOT_ENABLED if kubeflow_apps else Reason.APACHE_SPARK_NOT_ENABLED
    return Misfit(reason, str(exc), f"spec.applicationRef: {exc}", "spec.applicationRef")


def kubeflow_not_enabled(exc: foreign_apps.NotEnabled) -> Misfit:
    """:func:`not_enabled` for a Kubeflow application."""
    return not_enabled(kubeflow.KUBEFLOW, exc)


def _sparkglass(name: str, app: dict[str, Any]) -> _Application | Misfit:
    try:
        app_spec = SparkApplicationSpec.parse(app.get("spec"))
    except ValidationError:
        return Misfit(
            Reason.INVALID_APPLICATION,
            f"{name!r} has an invalid spec",
            f"not checked: SparkApplication {name!r} has an invalid spec",
        )
    sampling = app_spec.sampling
    return _Application(
        fit=Fit(
            vertices=tuple(v.name for v in app_spec.pipeline.vertices),
            sampling_window_ms=parse_duration_ms(sampling.sampling_window, field="samplingWindow"),
            timeout_ms=parse_duration_ms(sampling.timeout, field="timeout"),
            max_record_length=sampling.max_record_length,
        ),
        enabled=sampling.enabled,
        window=sampling.sampling_window,
        window_source="spec.sampling.samplingWindow",
        disabled_because="spec.sampling.enabled is false",
        foreign=False,
    )


def _foreign(apps: ForeignApps, name: str, app: dict[str, Any]) -> _Application | Misfit:
    if problem := apps.app_name_problem(name):
        return Misfit(
            Reason.INVALID_APPLICATION,
            problem,
            f"spec.applicationRef.name: {problem}",
            "spec.applicationRef.name",
        )
    try:
        settings = foreign_apps.sampling_settings(app)
    except SamplingSettingsError as exc:
        where = f"{name!r} spec.sparkConf: {exc}"
        return Misfit(Reason.INVALID_APPLICATION, where, f"not checked: {where}")
    return _Application(
        fit=Fit(
            vertices=(),
            sampling_window_ms=settings.sampling_window_ms,
            timeout_ms=settings.timeout_ms,
            max_record_length=settings.max_record_length,
        ),
        enabled=settings.enabled,
        window=f"{settings.sampling_window_ms / 1000:g}s",
        window_source=f"spec.sparkConf {foreign_apps.SAMPLING_WINDOW_KEY}",
        disabled_because=f"spec.sparkConf {foreign_apps.SAMPLING_ENABLED_KEY} is not true",
        foreign=True,
    )


__all__ = ["Fit", "Misfit", "Reason", "check", "foreign", "kubeflow_not_enabled", "not_enabled"]
