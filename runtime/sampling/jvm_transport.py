"""The Py4J bridge from the round coordinator to the sampling plugin's driver half.

The JVM half (``runtime/jvm``, ``io.sparkglass.sampling``) keeps per-round state on the
driver and hears from executors through Spark's plugin RPC; :class:`JvmTransport` is the
:class:`~sparkglass.runtime.sampling.rounds.RoundTransport` that calls it from Python.
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import SparkSession

from sparkglass.runtime.contract.sample_result import MAX_RECORDS_PER_RESPONSE
from sparkglass.runtime.contract.sampling_settings import SamplingSettings

#: The Java package of the JVM half.
JVM_PACKAGE = "io.sparkglass.sampling"
#: The Java package of the session extension and the code-generated gate.
EXTENSIONS_PACKAGE = "io.sparkglass.extensions"


class JvmTransport:
    """:class:`~sparkglass.runtime.sampling.rounds.RoundTransport` over the driver plugin (Py4J)."""

    def __init__(self, spark: SparkSession) -> None:
        self._spark = spark
        jvm = spark._jvm
        assert jvm is not None
        self._driver: Any = getattr(jvm, f"{JVM_PACKAGE}.SamplingDriver")
        self._udfs: Any = getattr(jvm, f"{JVM_PACKAGE}.TapUdfs")
        self._native_gates: Any = getattr(jvm, f"{EXTENSIONS_PACKAGE}.NativeGates")

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

    def register_native_gate(self, tap_key: str, gate: str, capture: str) -> None:
        """Register the tap's code-generated gate (``NativeTapGate``) as ``gate()`` and its
        capture UDF as ``capture(struct)`` in this session. Raises when the session cannot
        take it (the caller falls back to :meth:`register_udfs`)."""
        self._native_gates.registerTap(self._spark._jsparkSession, tap_key, gate, capture)

    def start_round(
        self,
        round_id: str,
        tap_key: str,
        settings: SamplingSettings,
        window_ms: int,
        program: str | None = None,
    ) -> None:
        """Fan a round out; ``program`` is its compiled row program (base64; see
        :mod:`sparkglass.runtime.sampling.programs`), ``None`` for every column, no filter.

        ``window_ms``: how long executors capture unless told to stop; the rate limit spreads
        ``max-sample-rate × (sampling-window + 1 s)`` records per partition over the round
        (``settings.sampling_window_ms``: the round's own window, see
        :meth:`RoundCoordinator.start_round`)."""
        self._driver.startRound(
            round_id,
            tap_key,
            window_ms,
            min(window_ms, settings.sampling_window_ms),
            settings.max_sample_rate,
            settings.max_record_length,
            settings.tostring_budget_ms,
            program,
            MAX_RECORDS_PER_RESPONSE,
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
