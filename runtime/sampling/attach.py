"""``sparkglass.runtime.attach(spark)``: the one line a plain Structured Streaming job adds.

The session extension (``spark.sql.extensions``, see
:mod:`sparkglass.runtime.sampling.discovery`) places the taps from configuration alone, but
the control endpoint and the round coordinator are Python and live in the driver process:
something must start them. A DSL ``Pipeline`` does it when its first tap is installed; a job
that never uses the DSL calls :func:`attach` once, before or after starting its queries::

    # jar, plugin, extension and confs come from spark-submit
    spark = SparkSession.builder.getOrCreate()
    sparkglass.runtime.attach(spark)
    ...writeStream.queryName("enriched").start()

``sparkglass pipelines run`` calls it for a Spark Declarative Pipeline, so that needs no line.
"""

from __future__ import annotations

import threading

from pyspark.sql import SparkSession

from sparkglass.runtime.contract.redaction import REDACT_CONF, hashes, parse_redaction
from sparkglass.runtime.contract.sampling_settings import settings_from_spark
from sparkglass.runtime.sampling.discovery import (
    EXTENSIONS_CLASS,
    DiscoveredPipeline,
    Graph,
    extension_loaded,
)
from sparkglass.runtime.sampling.programs import ensure_hash_function
from sparkglass.runtime.sampling.registry import REGISTRY, SamplingUnavailableError, application_key
from sparkglass.runtime.sampling.tap import control_enabled

_lock = threading.Lock()
_attached: dict[str, DiscoveredPipeline] = {}


def attach(
    spark: SparkSession, *, name: str = "streaming", graph: Graph | None = None
) -> DiscoveredPipeline | None:
    """Serve the discovered vertices of ``spark``'s application on its control endpoint.

    Does nothing and returns ``None`` when sampling is off
    (``spark.sparkglass.sampling.enabled=false``, the default) and
    ``spark.sparkglass.control.enabled`` is not set. A second call for the same application
    returns the first one's pipeline. Raises
    :class:`~sparkglass.runtime.sampling.registry.SamplingUnavailableError` when sampling is
    on but the plugin or the extension is not loaded (nothing would ever be tapped),
    :class:`~sparkglass.runtime.contract.errors.SamplingSettingsError` for redaction rules it
    cannot apply (malformed, naming a nested field, or hashing without a redaction key: see
    :func:`~sparkglass.runtime.sampling.programs.ensure_hash_function`), and ``OSError`` when
    the configured control port is taken.
    """
    settings = settings_from_spark(spark)
    if not settings.enabled and not control_enabled(spark):
        return None
    key = application_key(spark)
    with _lock:
        existing = _attached.get(key)
        if existing is not None:
            return existing
        app = REGISTRY.application(spark)
        if settings.enabled:
            app.require_plugin()
            if not extension_loaded(spark):
                raise SamplingUnavailableError(
                    "spark.sparkglass.sampling.enabled=true but the sampling extension is not "
                    f"loaded: add --conf spark.sql.extensions={EXTENSIONS_CLASS} (a static conf: "
                    "it must be set when the session starts)"
                )
            # Checked now, not when the first tap is registered: a vertex that cannot be
            # sampled there is only logged.
            rules = parse_redaction(spark.conf.get(REDACT_CONF, None))
            if hashes(rules):
                ensure_hash_function(spark)
        pipeline = DiscoveredPipeline(spark, app.coordinator, name, graph=graph)
        pipeline.refresh()
        REGISTRY.attach(pipeline, spark)
        pipeline.start()
        _attached[key] = pipeline
        return pipeline


def detach(spark: SparkSession) -> None:
    """Stop serving ``spark``'s discovered vertices (the endpoint stops with the last pipeline)."""
    with _lock:
        pipeline = _attached.pop(application_key(spark), None)
    if pipeline is not None:
        pipeline.stop()
        REGISTRY.detach(pipeline, spark)
