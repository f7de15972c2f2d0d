"""Installing the sampling tap at a vertex output, and the bridge to its JVM half.

With ``spark.sparkglass.sampling.enabled=true``, :func:`install_tap` adds to a vertex's
DataFrame the filter ::

    CASE WHEN sg_gate_N() THEN sg_capture_N(to_json(struct(*), map('ignoreNullFields', 'false')))
    ELSE true END

whose two JVM UDFs (``runtime/jvm``, registered nondeterministic so the optimizer never
folds or moves them) cost one volatile read per row when no round runs, render a row with
``to_json`` only when the gate admitted it, and always keep the row (forward-first). With
sampling disabled nothing is added: the physical plan is exactly the vertex's own.

The taps of an application share one :class:`~sparkglass.runtime.rounds.RoundCoordinator`
(:func:`coordinator_for`), talking to the driver plugin through :class:`JvmTransport`, and one
driver control endpoint (:mod:`sparkglass.runtime.control`), started with the first tap of a
pipeline and stopped when the last pipeline using it stops (:func:`detach`).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import threading
import uuid
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from .errors import SparkglassError
from .rounds import RoundCoordinator, TapInfo
from .sample_result import MAX_CONCURRENT_ROUNDS, DataSampleResult, SampleStatus
from .sampling_settings import SamplingSettings, settings_from_spark

if TYPE_CHECKING:
    from .control import ControlEndpoint
    from .pipeline import Pipeline

log = logging.getLogger(__name__)

#: The Java package of the JVM half.
JVM_PACKAGE = "io.sparkglass.sampling"
#: Prefixes of the per-tap UDF names (they show in the physical plan).
GATE_PREFIX = "sg_gate_"
CAPTURE_PREFIX = "sg_capture_"

_udf_counter = itertools.count(1)
_lock = threading.Lock()
_coordinators: dict[str, RoundCoordinator] = {}
_endpoints: dict[str, ControlEndpoint] = {}
_attached: dict[str, dict[int, Pipeline]] = {}


class SamplingUnavailableError(SparkglassError):
    """Sampling is enabled but the sampling plugin is not loaded in this Spark application."""


class JvmTransport:
    """:class:`~sparkglass.runtime.rounds.RoundTransport` over the driver plugin (Py4J)."""

    def __init__(self, spark: SparkSession) -> None:
        self._spark = spark
        jvm = spark._jvm
        assert jvm is not None
        self._driver: Any = getattr(jvm, f"{JVM_PACKAGE}.SamplingDriver")
        self._udfs: Any = getattr(jvm, f"{JVM_PACKAGE}.TapUdfs")

    def available(self) -> bool:
        """True when the driver plugin runs (``spark.plugins`` named it at startup)."""
        try:
            return bool(self._driver.isActive())
        except Exception:  # the class is not on the driver classpath
            return False

    def application_start_ms(self) -> int:
        """SparkContext start time, ms since the epoch."""
        return int(self._driver.applicationStartMs())

    def register_udfs(self, tap_key: str, gate: str, capture: str) -> None:
        """Register the tap's gate and capture UDFs in this session."""
        self._udfs.register(self._spark._jsparkSession, tap_key, gate, capture)

    def start_round(
        self, round_id: str, tap_key: str, settings: SamplingSettings, window_ms: int
    ) -> None:
        self._driver.startRound(
            round_id,
            tap_key,
            window_ms,
            settings.max_sample_rate,
            settings.max_record_length,
            settings.tostring_budget_ms,
        )

    def round_status(self, round_id: str) -> dict[str, Any]:
        return dict(json.loads(self._driver.roundStatus(round_id)))

    def round_reports(self, round_id: str) -> dict[str, list[dict[str, Any]]]:
        return dict(json.loads(self._driver.roundReports(round_id))["reports"])

    def cancel_round(self, round_id: str) -> None:
        self._driver.cancelRound(round_id)

    def forget_round(self, round_id: str) -> None:
        self._driver.forgetRound(round_id)

    def executors(self) -> dict[str, dict[str, int]]:
        """Executors that polled the driver: id → ``{"pid", "silentMs"}``."""
        return dict(json.loads(self._driver.executors()))

    def set_liveness_ms(self, ms: int) -> None:
        """How long an executor may stay silent before it counts as lost."""
        self._driver.setLivenessMs(ms)


def _app_key(spark: SparkSession) -> str:
    return str(spark.sparkContext.applicationId)


def coordinator_for(spark: SparkSession, *, require_plugin: bool = True) -> RoundCoordinator:
    """The application's coordinator (created on first use).

    Raises :class:`SamplingUnavailableError` when the sampling plugin is not loaded and
    ``require_plugin`` (without it the coordinator can still answer ``DISABLED``).
    """
    key = _app_key(spark)
    with _lock:
        coordinator = _coordinators.get(key)
        if coordinator is None:
            transport = JvmTransport(spark)
            start_ms = (
                transport.application_start_ms()
                if transport.available()
                else spark.sparkContext.startTime
            )
            coordinator = RoundCoordinator(
                transport, lambda: settings_from_spark(spark), round_prefix=str(start_ms)
            )
            _coordinators[key] = coordinator
    if require_plugin and not coordinator.transport.available():  # type: ignore[attr-defined]
        raise SamplingUnavailableError(
            "spark.sparkglass.sampling.enabled=true but the sampling plugin is not loaded: "
            "create the session with sparkglass.runtime.session.spark_session("
            "sampling_plugin=True), or pass --jars <sparkglass jar build -o ...> and "
            "--conf spark.plugins=io.sparkglass.sampling.SamplingPlugin to spark-submit"
        )
    return coordinator


def existing_coordinator(spark: SparkSession) -> RoundCoordinator | None:
    """The application's coordinator if a tap or endpoint created one."""
    with _lock:
        return _coordinators.get(_app_key(spark))


def pipeline_running(pipeline: Pipeline) -> bool | None:
    """Whether a pipeline's streaming queries still run (``None`` when it has none)."""
    queries = pipeline.queries
    if not queries:
        return None
    try:
        return any(q.isActive for q in queries.values())
    except Exception:  # a stopped session: nothing runs
        return False


def tap_expression(gate: str, capture: str) -> str:
    """The SQL filter condition of a tap (always true; see module docstring)."""
    # ignoreNullFields=false: a sampled record shows every column, null ones included.
    return (
        f"CASE WHEN {gate}() THEN "
        f"{capture}(to_json(struct(*), map('ignoreNullFields', 'false'))) ELSE true END"
    )


def install_tap(pipeline: Pipeline, vertex: str, df: DataFrame) -> DataFrame:
    """Return ``df`` with a tap at its output when sampling is enabled, else ``df`` itself.

    Also makes sure the application's coordinator and control endpoint run and know this
    pipeline. Raises :class:`SamplingUnavailableError` (plugin missing) and
    :class:`~sparkglass.runtime.sampling_settings.SamplingSettingsError` (bad conf).
    """
    spark = df.sparkSession
    settings = settings_from_spark(spark)
    if not settings.enabled:
        if control_enabled(spark):
            attach(pipeline, spark, require_plugin=False).register_vertices([vertex])
        return df
    coordinator = attach(pipeline, spark)
    transport = coordinator.transport
    assert isinstance(transport, JvmTransport)
    n = next(_udf_counter)
    gate, capture = f"{GATE_PREFIX}{n}", f"{CAPTURE_PREFIX}{n}"
    tap_key = f"{pipeline.name}/{vertex}/{uuid.uuid4().hex[:12]}"
    transport.register_udfs(tap_key, gate, capture)
    try:
        tapped = df.filter(F.expr(tap_expression(gate, capture)))
    except Exception as exc:  # never break the pipeline for sampling
        log.warning("cannot tap vertex %s (%s); it will not be sampleable", vertex, exc)
        return df
    coordinator.register_tap(
        TapInfo(
            vertex=vertex,
            tap_key=tap_key,
            data_type=df.schema.simpleString(),
            is_running=lambda: pipeline_running(pipeline),
        )
    )
    return tapped


def control_enabled(spark: SparkSession) -> bool:
    """``spark.sparkglass.control.enabled=true``: serve the endpoint even with sampling off."""
    return str(spark.conf.get("spark.sparkglass.control.enabled", "false")).lower() == "true"


def attach(
    pipeline: Pipeline, spark: SparkSession, *, require_plugin: bool = True
) -> RoundCoordinator:
    """Register ``pipeline`` with the application's coordinator and start the endpoint."""
    from .control import ControlEndpoint, ControlSettings

    coordinator = coordinator_for(spark, require_plugin=require_plugin)
    key = _app_key(spark)
    with _lock:
        _attached.setdefault(key, {})[id(pipeline)] = pipeline
        coordinator.describe = pipeline.describe
        endpoint = _endpoints.get(key)
        if endpoint is None:
            endpoint = ControlEndpoint(coordinator, ControlSettings.from_spark(spark))
            endpoint.start()
            _endpoints[key] = endpoint
            with contextlib.suppress(Exception):  # a discovery aid only
                spark.conf.set("spark.sparkglass.control.url", endpoint.url)
    try:
        names = [v.name for v in pipeline.describe().vertices if v.kind.value != "sink"]
        coordinator.register_vertices(names)
    except SparkglassError:
        pass  # graph still being built; the taps register their vertices themselves
    return coordinator


def sample_vertices(
    spark: SparkSession, vertices: list[str], timeout_s: float = 60.0
) -> dict[str, DataSampleResult]:
    """One round on each of ``vertices`` (at most 5 at a time); their results by vertex.

    For displays such as the demo's. Raises :class:`SamplingUnavailableError` without the
    plugin and :class:`~sparkglass.runtime.rounds.UnknownVertexError` for a bad name.
    """
    coordinator = coordinator_for(spark)
    results: dict[str, DataSampleResult] = {}
    for i in range(0, len(vertices), MAX_CONCURRENT_ROUNDS):
        batch = vertices[i : i + MAX_CONCURRENT_ROUNDS]
        started = {v: coordinator.start_round(v) for v in batch}
        for v, s in started.items():
            if s.status is SampleStatus.PENDING and s.round_id is not None:
                results[v] = coordinator.wait(s.round_id, timeout_s)
            else:
                results[v] = s
    return results


def endpoint_for(spark: SparkSession) -> ControlEndpoint | None:
    """The running control endpoint of the application, if any."""
    with _lock:
        return _endpoints.get(_app_key(spark))


def detach(pipeline: Pipeline) -> None:
    """The pipeline stopped: stop the endpoint when no attached pipeline is left."""
    try:
        spark = pipeline.spark
        key = _app_key(spark)
    except Exception:  # no session: nothing was attached
        return
    with _lock:
        users = _attached.get(key)
        if not users or id(pipeline) not in users:
            return
        del users[id(pipeline)]
        endpoint = _endpoints.pop(key, None) if not users else None
        coordinator = _coordinators.get(key)
        if users and coordinator is not None:  # describe a pipeline that still runs
            coordinator.describe = list(users.values())[-1].describe
    if endpoint is not None:
        endpoint.stop()
