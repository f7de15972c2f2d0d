"""Does a DataSample fit its application (``operator/sample_fit.py``), without a server.

The inputs are the repository's examples (``examples/flights-sparkapplication.yaml``,
``examples/kubeflow-sparkapplication.yaml`` and their DataSamples), changed one field at a
time. The webhook and the reconciler both answer from :func:`sample_fit.check`; their own
tests (``test_admission.py``, ``test_datasample.py``, ``test_kubeflow.py``) check the
answer reaches the API server and the status; here are the rules and both callers' words.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from sparkglass.operator import kubeflow, sample_fit
from sparkglass.operator.sample_fit import Fit, Misfit, Reason
from sparkglass.operator.specs import DataSampleSpec

from .conftest import EXAMPLES_DIR

WINDOW_KEY = "spark.sparkglass.sampling.sampling-window"
ENABLED_KEY = "spark.sparkglass.sampling.enabled"


def example(name: str) -> dict[str, Any]:
    """The first document of an example (the Kubeflow one also holds a Service)."""
    loaded: dict[str, Any] = next(yaml.safe_load_all((EXAMPLES_DIR / name).read_text()))
    return loaded


def sparkglass_app(**sampling: Any) -> dict[str, Any]:
    app = example("flights-sparkapplication.yaml")
    app["spec"]["sampling"].update(sampling)
    return app


def kubeflow_app(**conf: str | None) -> dict[str, Any]:
    app = example("kubeflow-sparkapplication.yaml")
    spark_conf = app["spec"]["sparkConf"]
    for key, value in conf.items():
        if value is None:
            spark_conf.pop(key, None)
        else:
            spark_conf[key] = value
    return app


def sample(vertex: str = "parse", **spec: Any) -> DataSampleSpec:
    body = copy.deepcopy(example("flights-datasample.yaml")["spec"])
    body.update(vertex=vertex, **spec)
    return DataSampleSpec.parse(body)


def kubeflow_sample(vertex: str = "parse", **spec: Any) -> DataSampleSpec:
    body = copy.deepcopy(example("kubeflow-datasample.yaml")["spec"])
    body.update(vertex=vertex, **spec)
    return DataSampleSpec.parse(body)


def misfit(answer: Fit | Misfit) -> Misfit:
    assert isinstance(answer, Misfit), answer
    return answer


# --------------------------------------------------------------------------- sparkglass
def test_the_example_datasample_fits_the_example_application() -> None:
    spec = sample()
    assert spec.application_ref.name == "flights" and not spec.application_ref.is_kubeflow
    fit = sample_fit.check(spec, sparkglass_app())
    assert fit == Fit(
        vertices=(
            "flights",
            "schedule",
            "airports",
            "parse",
            "delays-by-carrier",
            "busiest-origins",
            "enrich-origin",
            "carrier-delays",
            "enriched-flights",
        ),
        sampling_window_ms=3000,
        timeout_ms=30000,
        max_record_length=10000,
    ), fit


def test_a_vertex_the_pipeline_does_not_declare_is_refused_listing_them_only_in_status() -> None:
    found = misfit(sample_fit.check(sample("prase"), sparkglass_app()))
    assert (found.reason, found.phase, found.field) == (
        Reason.UNKNOWN_VERTEX,
        "Failed",
        "spec.vertex",
    )
    assert found.denies
    assert found.message == (
        "vertex 'prase' is not in application 'flights'; vertices: flights, schedule, "
        "airports, parse, delays-by-carrier, busiest-origins, enrich-origin, carrier-delays, "
        "enriched-flights"
    )
    # The webhook's words name the field and list nothing (a forged review learns nothing).
    assert found.review == (
        "spec.vertex: vertex 'prase' is not in application 'flights' (its spec.pipeline.vertices)"
    )
    assert "schedule" not in found.review


def test_an_application_declaring_no_pipeline_leaves_the_vertex_to_the_driver() -> None:
    app = sparkglass_app()
    del app["spec"]["pipeline"]
    fit = sample_fit.check(sample("anything-at-all"), app)
    assert isinstance(fit, Fit) and fit.vertices == ()


@pytest.mark.parametrize("window", ["3s", "3000ms", "1s", "2s999ms"])
def test_a_window_up_to_the_applications_fits_in_any_spelling(window: str) -> None:
    assert isinstance(sample_fit.check(sample(samplingWindow=window), sparkglass_app()), Fit)


def test_a_window_past_the_applications_is_refused_in_both_callers_words() -> None:
    found = misfit(sample_fit.check(sample(samplingWindow="3001ms"), sparkglass_app()))
    assert (found.reason, found.phase, found.field) == (
        Reason.INVALID_SAMPLING_WINDOW,
        "Failed",
        "spec.samplingWindow",
    )
    assert found.message == (
        "samplingWindow 3001ms exceeds the application's 3s (spec.sampling.samplingWindow)"
    )
    assert found.review == (
        "spec.samplingWindow: 3001ms exceeds the application's 3s "
        "(its spec.sampling.samplingWindow); allowed 1s–3s"
    )
    # The application's window as written: a wider one lets the same DataSample fit.
    assert isinstance(
        sample_fit.check(sample(samplingWindow="20s"), sparkglass_app(samplingWindow="20s")), Fit
    )


def test_sampling_off_ends_disabled_and_is_admitted_with_a_warning() -> None:
    found = misfit(sample_fit.check(sample(), sparkglass_app(enabled=False)))
    assert (found.reason, found.phase, found.field, found.denies) == (
        Reason.SAMPLING_DISABLED,
        "Disabled",
        None,
        False,
    )
    assert found.message == "sampling is disabled for 'flights' (spec.sampling.enabled is false)"
    assert found.review == found.message + ": the DataSample will end Disabled"


def test_the_first_rule_broken_is_the_answer() -> None:
    off = sparkglass_app(enabled=False)
    # A DataSample's own fault comes before the application's sampling switch...
    assert misfit(sample_fit.check(sample("nope"), off)).reason is Reason.UNKNOWN_VERTEX
    wide = sample(samplingWindow="10s")
    assert misfit(sample_fit.check(wide, off)).reason is Reason.INVALID_SAMPLING_WINDOW
    # ...the vertex before the window, and an invalid application before all of them.
    assert misfit(sample_fit.check(sample("nope", samplingWindow="10s"), off)).reason is (
        Reason.UNKNOWN_VERTEX
    )
    broken = sparkglass_app(enabled=False, controlPort=4040)
    assert misfit(sample_fit.check(sample("nope"), broken)).reason is Reason.INVALID_APPLICATION


@pytest.mark.parametrize(
    "change",
    [
        {"controlPort": 4040},  # one of the driver's other ports
        {"maxSampleRate": 0},  # below the driver's 1–10000
        {"samplingWindow": "3 s"},  # not a duration of the grammar
    ],
)
def test_an_invalid_application_fails_the_datasample_and_is_admitted_unchecked(
    change: dict[str, Any],
) -> None:
    found = misfit(sample_fit.check(sample(), sparkglass_app(**change)))
    assert (found.reason, found.phase, found.denies) == (
        Reason.INVALID_APPLICATION,
        "Failed",
        False,
    )
    assert found.message == "'flights' has an invalid spec"
    assert found.review == "not checked: SparkApplication 'flights' has an invalid spec"


def test_the_rounds_limits_come_from_the_application() -> None:
    fit = sample_fit.check(
        sample(), sparkglass_app(timeout="1m30s", maxRecordLength=500, samplingWindow="5s")
    )
    assert isinstance(fit, Fit)
    assert (fit.timeout_ms, fit.max_record_length, fit.sampling_window_ms) == (90000, 500, 5000)


# --------------------------------------------------------------------------- Kubeflow
def test_the_kubeflow_example_fits_with_the_settings_of_its_spark_conf() -> None:
    spec = kubeflow_sample()
    assert spec.application_ref.is_kubeflow
    fit = sample_fit.check(spec, kubeflow_app())
    # No declared pipeline: whether 'parse' exists is the driver's to say.
    assert fit == Fit(
        vertices=(), sampling_window_ms=3000, timeout_ms=30000, max_record_length=10000
    )
    assert isinstance(sample_fit.check(kubeflow_sample("no-such-step"), kubeflow_app()), Fit)


def test_a_kubeflow_window_past_the_spark_conf_is_refused_naming_the_key() -> None:
    app = kubeflow_app(**{WINDOW_KEY: "1500ms"})
    found = misfit(sample_fit.check(kubeflow_sample(samplingWindow="2s"), app))
    assert (found.reason, found.phase, found.field) == (
        Reason.INVALID_SAMPLING_WINDOW,
        "Failed",
        "spec.samplingWindow",
    )
    assert found.message == (
        f"samplingWindow 2s exceeds the application's 1.5s (spec.sparkConf {WINDOW_KEY})"
    )
    assert found.review == (
        f"spec.samplingWindow: 2s exceeds the application's 1.5s (spec.sparkConf {WINDOW_KEY})"
    )
    assert isinstance(sample_fit.check(kubeflow_sample(samplingWindow="1500ms"), app), Fit)
    # Unset in sparkConf: the driver's default window (3s) bounds it.
    unset = kubeflow_app(**{WINDOW_KEY: None})
    assert isinstance(sample_fit.check(kubeflow_sample(samplingWindow="3s"), unset), Fit)
    assert misfit(sample_fit.check(kubeflow_sample(samplingWindow="4s"), unset)).reason is (
        Reason.INVALID_SAMPLING_WINDOW
    )


@pytest.mark.parametrize("enabled", [None, "false", "FALSE"])
def test_a_kubeflow_application_not_opting_in_ends_the_datasample_disabled(
    enabled: str | None,
) -> None:
    found = misfit(sample_fit.check(kubeflow_sample(), kubeflow_app(**{ENABLED_KEY: enabled})))
    assert (found.reason, found.phase, found.denies) == (
        Reason.SAMPLING_DISABLED,
        "Disabled",
        False,
    )
    assert found.message == (
        f"sampling is disabled for 'flights-kf' (spec.sparkConf {ENABLED_KEY} is not true)"
    )
    assert found.review.endswith("): the DataSample will end Disabled")


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("spark.sparkglass.sampling.timeout", "1h"),  # past 10m
        (ENABLED_KEY, "yes"),  # neither true nor false
        (WINDOW_KEY, "3"),  # no unit
    ],
)
def test_invalid_kubeflow_sampling_settings_fail_the_datasample_naming_the_key(
    key: str, value: str
) -> None:
    found = misfit(sample_fit.check(kubeflow_sample(), kubeflow_app(**{key: value})))
    assert (found.reason, found.phase, found.denies) == (
        Reason.INVALID_APPLICATION,
        "Failed",
        False,
    )
    assert found.message.startswith(f"'flights-kf' spec.sparkConf: {key}"), found.message
    assert found.review == f"not checked: {found.message}"


def test_a_kubeflow_name_that_cannot_name_the_control_secret_is_refused() -> None:
    # The CRD's CEL rule refuses it at the API server; an object that bypassed it (no CEL,
    # a restored backup) is refused by both callers alike.
    name = "f" * 45
    spec = kubeflow_sample(applicationRef={"apiVersion": kubeflow.API_VERSION, "name": name})
    app = kubeflow_app()
    app["metadata"]["name"] = name
    found = misfit(sample_fit.check(spec, app))
    assert (found.reason, found.phase, found.field) == (
        Reason.INVALID_APPLICATION,
        "Failed",
        "spec.applicationRef.name",
    )
    assert found.message == kubeflow.app_name_problem(name)
    assert found.review == f"spec.applicationRef.name: {found.message}"


def test_an_operator_that_may_not_read_kubeflow_applications_refuses_naming_the_ref() -> None:
    found = sample_fit.kubeflow_not_enabled(kubeflow.NotEnabled("install with kubeflow.enabled"))
    assert (found.reason, found.phase, found.field) == (
        Reason.KUBEFLOW_NOT_ENABLED,
        "Failed",
        "spec.applicationRef",
    )
    assert found.message == "install with kubeflow.enabled"
    assert found.review == "spec.applicationRef: install with kubeflow.enabled"


def test_the_kind_of_the_reference_picks_the_rules() -> None:
    """A Kubeflow application's sparkConf means nothing to a DataSample naming a sparkglass
    one, and the reverse: the rules follow ``applicationRef.apiVersion``."""
    # A Kubeflow object read as a sparkglass SparkApplication's spec: not one.
    found = misfit(sample_fit.check(sample(applicationRef={"name": "flights-kf"}), kubeflow_app()))
    assert found.reason is Reason.INVALID_APPLICATION
    assert found.message == "'flights-kf' has an invalid spec"
    # A sparkglass one read for its sparkConf: it sets none, so it never opted in.
    found = misfit(sample_fit.check(kubeflow_sample(), sparkglass_app()))
    assert found.reason is Reason.SAMPLING_DISABLED
    assert found.message.endswith(f"(spec.sparkConf {ENABLED_KEY} is not true)")
