"""DataSamples run by the real operator process against a scripted driver control endpoint
(HTTPS, the certificate of the application's Secret): the driver and its fixture, the example
application running, DataSample bodies, their status and phases, the operator's events.

One source for every test module that needs them. The definitions still live in
``tests/operator/test_datasample.py`` (being changed elsewhere at the time of the move) and
are re-exported from here; they are to move into this module, with that test module
importing them from here, so that no test module imports another
(``tests/test_layout.py``).
"""

from __future__ import annotations

from tests.operator.test_datasample import (  # the definitions, until they move here
    APPS,
    FINAL,
    SAMPLES,
    SERVICE_URL,
    ScriptedDriver,
    driver,
    events_for,
    example,
    operator_args,
    patch_status,
    phase,
    post,
    result_service,
    running_app,
    sample_body,
    secret_entry,
    serve_driver,
    status,
    store_url,
    wait_final,
)

__all__ = [
    "APPS",
    "FINAL",
    "SAMPLES",
    "SERVICE_URL",
    "ScriptedDriver",
    "driver",
    "events_for",
    "example",
    "operator_args",
    "patch_status",
    "phase",
    "post",
    "result_service",
    "running_app",
    "sample_body",
    "secret_entry",
    "serve_driver",
    "status",
    "store_url",
    "wait_final",
]
