"""The sampling state of each Spark application in this driver: one object with a lifecycle.

A Spark application (one ``SparkContext``) gets one :class:`SamplingApplication` the first
time a pipeline attaches to it: a :class:`~sparkglass.runtime.sampling.rounds.RoundCoordinator`
talking to the driver plugin through
:class:`~sparkglass.runtime.sampling.jvm_transport.JvmTransport`,
and one driver control endpoint (:mod:`sparkglass.runtime.control.endpoint`). Pipelines
attach when their first tap is installed and detach when they stop; the endpoint stops
when the last one detaches. The coordinator outlives that (a pipeline started later in the
same application keeps counting round ids from where the last one stopped).

Module functions (:func:`coordinator_for`, :func:`endpoint_for`, …) reach the process's one
:data:`REGISTRY`, because a Spark driver has one JVM and Spark itself keys sessions the same way.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Any, Protocol

from pyspark.sql import SparkSession

from sparkglass.runtime.contract.errors import SparkglassError
from sparkglass.runtime.contract.sampling_settings import settings_from_spark
from sparkglass.runtime.control.endpoint import ControlEndpoint, ControlSettings
from sparkglass.runtime.sampling.jvm_transport import JvmTransport
from sparkglass.runtime.sampling.rounds import RoundCoordinator

log = logging.getLogger(__name__)


class SamplingUnavailableError(SparkglassError):
    """Sampling is enabled but the sampling plugin is not loaded in this Spark application."""


class AttachedPipeline(Protocol):
    """What the registry needs of a pipeline (``sparkglass.runtime.pipeline.Pipeline``)."""

    @property
    def name(self) -> str: ...

    def describe(self) -> Any: ...

    def metrics(self) -> Any: ...


def application_key(spark: SparkSession) -> str:
    """The registry key of a session's application (``spark.app.id``)."""
    return str(spark.sparkContext.applicationId)


class SamplingApplication:
    """One Spark application's coordinator, control endpoint and attached pipelines."""

    def __init__(self, spark: SparkSession) -> None:
        transport = JvmTransport(spark)
        start_ms = (
            transport.application_start_ms()
            if transport.available()
            else spark.sparkContext.startTime
        )
        self.spark = spark
        self.transport = transport
        self.coordinator = RoundCoordinator(
            transport, lambda: settings_from_spark(spark), round_prefix=str(start_ms)
        )
        self.endpoint: ControlEndpoint | None = None
        self._pipelines: dict[int, AttachedPipeline] = {}

    def require_plugin(self) -> None:
        """Raise :class:`SamplingUnavailableError` when the sampling plugin is not loaded."""
        if not self.transport.available():
            raise SamplingUnavailableError(
                "spark.sparkglass.sampling.enabled=true but the sampling plugin is not loaded: "
                "create the session with sparkglass.runtime.session.spark_session("
                "sampling_plugin=True), or pass --jars <sparkglass jar build -o ...> and "
                "--conf spark.plugins=io.sparkglass.sampling.SamplingPlugin to spark-submit"
            )

    def attach(self, pipeline: AttachedPipeline) -> None:
        """Serve ``pipeline``'s description; start the control endpoint if none runs.

        Raises ``OSError`` when the configured control port is taken and
        :class:`~sparkglass.runtime.contract.sampling_settings.SamplingSettingsError` for a
        bad ``spark.sparkglass.control.*`` conf.
        """
        self._pipelines[id(pipeline)] = pipeline
        self.coordinator.describe = pipeline.describe
        self.coordinator.expectation_counts = self._expectation_counts
        self.coordinator.progress = pipeline.metrics
        if self.endpoint is None:
            endpoint = ControlEndpoint(self.coordinator, ControlSettings.from_spark(self.spark))
            endpoint.start()
            self.endpoint = endpoint
            with contextlib.suppress(Exception):  # a discovery aid only
                self.spark.conf.set("spark.sparkglass.control.url", endpoint.url)
        try:
            names = [v.name for v in pipeline.describe().vertices if v.kind.value != "sink"]
            self.coordinator.register_vertices(names)
        except SparkglassError:
            pass  # graph still being built; the taps register their vertices themselves

    def _expectation_counts(self) -> list[Any]:
        """The expectation counts of every attached pipeline (an application may run several)."""
        out: list[Any] = []
        for pipeline in list(self._pipelines.values()):
            counts = getattr(pipeline, "expectation_counts", None)
            if counts is not None:
                with contextlib.suppress(Exception):  # a pipeline still being built
                    out.extend(counts())
        return out

    def detach(self, pipeline: AttachedPipeline) -> bool:
        """Forget ``pipeline``; True when no pipeline is left (the caller stops the endpoint)."""
        if self._pipelines.pop(id(pipeline), None) is None:
            return False
        if self._pipelines:  # describe a pipeline that still runs
            remaining = list(self._pipelines.values())[-1]
            self.coordinator.describe = remaining.describe
            self.coordinator.progress = remaining.metrics
            return False
        return True

    def attached(self, pipeline: AttachedPipeline) -> bool:
        """Whether ``pipeline`` is attached here."""
        return id(pipeline) in self._pipelines

    def stop_endpoint(self) -> None:
        """Stop the control endpoint (idempotent); a later :meth:`attach` starts a new one."""
        endpoint, self.endpoint = self.endpoint, None
        if endpoint is not None:
            endpoint.stop()


class SamplingRegistry:
    """The :class:`SamplingApplication` of each Spark application in this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._applications: dict[str, SamplingApplication] = {}

    def application(self, spark: SparkSession) -> SamplingApplication:
        """The application of ``spark`` (created on first use)."""
        key = application_key(spark)
        with self._lock:
            app = self._applications.get(key)
            if app is None:
                app = self._applications[key] = SamplingApplication(spark)
            return app

    def existing(self, spark: SparkSession) -> SamplingApplication | None:
        """The application of ``spark`` if a tap or endpoint created it."""
        with self._lock:
            return self._applications.get(application_key(spark))

    def attach(self, pipeline: AttachedPipeline, spark: SparkSession) -> SamplingApplication:
        """Attach ``pipeline`` to its application (see :meth:`SamplingApplication.attach`)."""
        app = self.application(spark)
        with self._lock:
            app.attach(pipeline)
        return app

    def detach(self, pipeline: AttachedPipeline, spark: SparkSession) -> None:
        """The pipeline stopped: stop the endpoint when no attached pipeline is left."""
        with self._lock:
            app = self._applications.get(application_key(spark))
            if app is None or not app.detach(pipeline):
                return
        app.stop_endpoint()


#: The registry of this driver process.
REGISTRY = SamplingRegistry()


def coordinator_for(spark: SparkSession, *, require_plugin: bool = True) -> RoundCoordinator:
    """The application's coordinator (created on first use).

    Raises :class:`SamplingUnavailableError` when the sampling plugin is not loaded and
    ``require_plugin`` (without it the coordinator can still answer ``DISABLED``).
    """
    app = REGISTRY.application(spark)
    if require_plugin:
        app.require_plugin()
    return app.coordinator


def existing_coordinator(spark: SparkSession) -> RoundCoordinator | None:
    """The application's coordinator if a tap or endpoint created one."""
    app = REGISTRY.existing(spark)
    return app.coordinator if app is not None else None


def endpoint_for(spark: SparkSession) -> ControlEndpoint | None:
    """The running control endpoint of the application, if any."""
    app = REGISTRY.existing(spark)
    return app.endpoint if app is not None else None
