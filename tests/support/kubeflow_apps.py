"""Kubeflow spark-operator SparkApplications on the test API server, the emulator playing the
spark-operator: their CRDs applied, an application and its driver Pod, the control Secret
served by a scripted driver, DataSamples against them.

The definitions still live in ``tests/operator/test_kubeflow.py`` (being changed elsewhere at
the time of the move) and are re-exported from here; they are to move into this module, with
that test module importing them from here (``tests/test_layout.py``).
"""

from __future__ import annotations

from tests.operator.test_kubeflow import (  # the definitions, until they move here
    APP,
    crds_applied,
    create_kubeflow_app,
    driver_pod,
    kubeflow_app,
    kubeflow_sample,
    post_sample,
    ready,
    running_kubeflow_app,
    serve_as_driver,
    set_state,
    start_pod,
)

__all__ = [
    "APP",
    "crds_applied",
    "create_kubeflow_app",
    "driver_pod",
    "kubeflow_app",
    "kubeflow_sample",
    "post_sample",
    "ready",
    "running_kubeflow_app",
    "serve_as_driver",
    "set_state",
    "start_pod",
]
