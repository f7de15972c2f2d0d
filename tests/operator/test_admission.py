"""The DataSample admission webhook of the real operator process (``operator/admission.py``).

The operator runs as in ``test_datasample.py`` (kmock API server, scripted driver over the
pinned HTTPS of the application's Secret) with ``--webhook-port``; each test sends the
``admission.k8s.io/v1`` AdmissionReview an API server would send, over HTTPS to that port,
and reads the verdict. kmock runs no admission chain (it never calls a webhook), so these
tests play the API server's part of that call; what the API server does with the verdict
(refuse the create with the message, print the warnings) is Kubernetes' own. The driver
side of the check (Spark's parser and analyzer) is tested on a real local Spark in
``tests/security/test_round_requests.py`` and ``test_real_driver.py``.
"""

from __future__ import annotations

import pytest

from tests.support.admission_webhook import Webhook, allowed, denied
from tests.support.admission_webhook import operator_args as operator_args  # the fixtures
from tests.support.admission_webhook import webhook as webhook
from tests.support.admission_webhook import webhook_tls as webhook_tls
from tests.support.datasamples import ScriptedDriver, running_app, sample_body
from tests.support.datasamples import driver as driver  # the fixture, by name

from .conftest import NAMESPACE, OperatorProcess, StrictApiServer

pytestmark = pytest.mark.timeout(180)


async def test_a_filter_the_driver_refuses_is_denied_naming_the_field_and_opens_nothing(
    kube: StrictApiServer, operator: OperatorProcess, driver: ScriptedDriver, webhook: Webhook
) -> None:
    await running_app(kube, operator, driver)
    driver.behaviour["parse"] = "reject-filter"
    message = denied(await webhook.review(sample_body("typo", "parse", filter="carier = 'UA'")))
    # The driver's words, without its list of the vertex's columns (a review cannot be told
    # from a forged one: tests/security/test_admission_webhook.py).
    assert message == "spec.filter: unknown column 'carier' at vertex 'parse'", message
    assert driver.calls["check:parse"] == 1
    assert driver.calls["open:parse"] == 0  # a review opens no round
    assert kube.stored("sparkglass.io/v1alpha1/datasamples", NAMESPACE, "typo") is None


async def test_a_request_the_driver_takes_is_admitted_without_warnings(
    kube: StrictApiServer, operator: OperatorProcess, driver: ScriptedDriver, webhook: Webhook
) -> None:
    await running_app(kube, operator, driver)
    body = sample_body("ok", "parse", filter="carrier = 'UA'", columns=["carrier", "dep_delay"])
    assert allowed(await webhook.review(body)) == []
    assert driver.calls["check:parse"] == 1
    # Only what the CREATE carries is checked: the spec is immutable, so an UPDATE (status,
    # finalizers) is admitted without asking anyone, even with the driver refusing now.
    driver.behaviour["parse"] = "reject-filter"
    assert allowed(await webhook.review(body, operation="UPDATE")) == []
    assert driver.calls["check:parse"] == 1


async def test_a_vertex_or_window_the_application_does_not_allow_is_denied_from_its_spec(
    kube: StrictApiServer, operator: OperatorProcess, driver: ScriptedDriver, webhook: Webhook
) -> None:
    """The application declares its vertices and window: no driver call is needed."""
    await running_app(kube, operator, driver)
    message = denied(await webhook.review(sample_body("nope", "prase")))
    assert message.startswith("spec.vertex: vertex 'prase' is not in application 'flights'")
    assert "schedule" not in message  # no list of the application's vertices
    message = denied(await webhook.review(sample_body("wide", "parse", samplingWindow="20s")))
    assert message.startswith("spec.samplingWindow: 20s exceeds the application's 3s"), message
    # A plain round at a declared vertex needs nothing only the driver knows.
    assert allowed(await webhook.review(sample_body("plain", "parse"))) == []
    assert sum(n for k, n in driver.calls.items() if k.startswith("check:")) == 0


async def test_what_cannot_be_checked_is_admitted_with_a_warning_saying_so(
    kube: StrictApiServer, operator: OperatorProcess, driver: ScriptedDriver, webhook: Webhook
) -> None:
    """No application yet, a driver without the check, a driver that does not answer in
    time: admitted (the driver checks the round when it opens), with a warning saying what
    was not checked."""
    (warning,) = allowed(
        await webhook.review(sample_body("early", "parse", app="later", filter="x = 1"))
    )
    assert "'later' is not in namespace" in warning, warning
    await running_app(kube, operator, driver)
    driver.behaviour["parse"] = "old"
    (warning,) = allowed(await webhook.review(sample_body("old", "parse", filter="x = 1")))
    assert "not checked yet" in warning and "older" in warning, warning
    driver.behaviour["parse"] = "slow"
    (warning,) = allowed(await webhook.review(sample_body("slow", "parse", filter="x = 1")))
    assert "did not answer" in warning, warning
    driver.check_gate.set()
    driver.behaviour["parse"] = "disabled"
    (warning,) = allowed(await webhook.review(sample_body("off", "parse", filter="x = 1")))
    assert "end Disabled" in warning, warning


async def test_an_application_with_sampling_off_is_admitted_with_a_warning(
    kube: StrictApiServer, operator: OperatorProcess, driver: ScriptedDriver, webhook: Webhook
) -> None:
    await running_app(kube, operator, driver, sampling=False)
    (warning,) = allowed(await webhook.review(sample_body("off", "parse", filter="x = 1")))
    assert "sampling is disabled for 'flights'" in warning, warning
    assert driver.calls["check:parse"] == 0
