"""``status.executorState`` and ``status.sparkApplicationId`` of a SparkApplication.

Spark creates the executor Pods itself (the driver runs ``--deploy-mode client``), labelled
``spark-role: executor``, ``spark-app-selector: <Spark application id>`` and, through the
operator's ``spark.kubernetes.executor.label.sparkglass.io/application``, with the
application's name; because the operator sets ``spark.kubernetes.driver.pod.name``, Spark
makes the driver Pod their owner. The operator watches them (one server-side selected Pod
watch, :data:`POD_WATCH_SELECTOR`, shared with the driver Pods) and reports, as the Kubeflow
spark-operator does:

* ``executorState``: executor Pod name → ``PENDING``, ``RUNNING``, ``COMPLETED``, ``FAILED``
  or ``UNKNOWN`` (the Pod's phase; an ended executor container decides a Pod still shown
  Running). Only Pods owned by the current driver Pod count, so a Pod someone labels like an
  executor, or a former run's executor, is not reported. An executor whose Pod is gone (Spark
  deletes them) keeps its last state once it ended; one that had not ended becomes
  ``UNKNOWN`` while the driver runs, else ``COMPLETED`` after a driver that succeeded and
  ``FAILED`` otherwise. A new driver run starts an empty map. At most
  :data:`MAX_EXECUTORS` entries: ended executors whose Pods are gone go first, oldest first.
* ``sparkApplicationId``: the driver Pod's ``spark-app-selector`` label when it has one
  (Pods spark-submit creates in cluster mode do), else the label of the current run's
  executors (client mode: the driver's SparkContext labels each executor with its id).

Display only: nothing the operator decides reads them back.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from . import names

#: Spark's labels on the Pods it creates.
LABEL_SPARK_ROLE = "spark-role"
LABEL_SPARK_APP_SELECTOR = "spark-app-selector"
ROLE_EXECUTOR = "executor"
#: Spark's executor container (the executor Pod template names its container the same).
EXECUTOR_CONTAINER = "spark-kubernetes-executor"
#: The server-side label selector of the operator's one Pod watch: every Pod carrying an
#: application label (the operator's driver Pods, and the executor Pods Spark labels for it).
#: kopf opens one watch per resource, so driver and executor Pods share it; handlers and
#: indexes then filter by their own labels.
POD_WATCH_SELECTOR = names.LABEL_APP
#: Executor labels the kopf handlers filter on (client side, within the watch).
EXECUTOR_POD_LABELS: dict[str, Any] = {LABEL_SPARK_ROLE: ROLE_EXECUTOR}

PENDING, RUNNING, COMPLETED, FAILED, UNKNOWN = (
    "PENDING",
    "RUNNING",
    "COMPLETED",
    "FAILED",
    "UNKNOWN",
)
STATES = (PENDING, RUNNING, COMPLETED, FAILED, UNKNOWN)
ENDED = frozenset({COMPLETED, FAILED})
#: Most entries in ``executorState`` (a long job with dynamic allocation starts many).
MAX_EXECUTORS = 500

_PHASES = {"Pending": PENDING, "Running": RUNNING, "Succeeded": COMPLETED, "Failed": FAILED}
_EXEC_NUMBER = re.compile(r"-(\d+)$")


def summary(pod: dict[str, Any]) -> dict[str, Any]:
    """The parts of an executor Pod the status needs (what the kopf index keeps)."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    return {
        "metadata": {
            "name": meta.get("name"),
            "labels": dict(meta.get("labels") or {}),
            "ownerReferences": [
                {"uid": r.get("uid"), "kind": r.get("kind")}
                for r in meta.get("ownerReferences") or []
            ],
        },
        "status": {
            "phase": status.get("phase"),
            "containerStatuses": [
                {"name": c.get("name"), "state": c.get("state")}
                for c in status.get("containerStatuses") or []
            ],
        },
    }


def pod_state(pod: dict[str, Any]) -> str:
    """The executor state of one Pod."""
    status = pod.get("status") or {}
    for container in status.get("containerStatuses") or []:
        if container.get("name") != EXECUTOR_CONTAINER:
            continue
        ended = (container.get("state") or {}).get("terminated")
        if ended:  # the executor ended; the Pod may still be shown Running (sidecars)
            return COMPLETED if ended.get("exitCode") == 0 else FAILED
    return _PHASES.get(status.get("phase") or "", UNKNOWN)


def of_driver(pods: list[dict[str, Any]], driver: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The executor Pods the current driver Pod owns (Spark's owner reference)."""
    uid = ((driver or {}).get("metadata") or {}).get("uid")
    if not uid:
        return []
    return [
        p
        for p in pods
        if (p.get("metadata") or {}).get("name")
        and any(r.get("uid") == uid for r in (p.get("metadata") or {}).get("ownerReferences") or [])
    ]


def executor_state(
    pods: list[dict[str, Any]],
    previous: dict[str, Any] | None,
    *,
    driver_state: str,
) -> dict[str, str | None]:
    """``status.executorState`` for a JSON merge patch: the current executors' states, the
    gone ones' last states (see the module docstring), and ``None`` for entries dropped past
    :data:`MAX_EXECUTORS` (a merge patch deletes them). ``driver_state`` is the driver
    Pod's state: ``RUNNING``/``SUBMITTED`` (still running), ``SUCCEEDING`` (it succeeded),
    anything else (it failed, or is gone)."""
    current = {str(p["metadata"]["name"]): pod_state(p) for p in pods}
    out: dict[str, str | None] = dict(current)
    gone: dict[str, str] = {}
    for name, state in (previous or {}).items():
        if name in current or not isinstance(name, str):
            continue
        if state in ENDED:
            gone[name] = str(state)
        elif driver_state in ("RUNNING", "SUBMITTED", "UNKNOWN"):
            gone[name] = UNKNOWN
        else:
            gone[name] = COMPLETED if driver_state == "SUCCEEDING" else FAILED
    out.update(gone)
    excess = len(out) - MAX_EXECUTORS
    if excess > 0:
        # Ended executors whose Pods are gone go first, lowest executor number first.
        droppable = sorted((n for n in gone if gone[n] in ENDED), key=_exec_order)
        droppable += sorted((n for n in gone if n not in droppable), key=_exec_order)
        for name in droppable[:excess]:
            out[name] = None
    return out


def application_id(driver: dict[str, Any] | None, executors: list[dict[str, Any]]) -> str | None:
    """Spark's application id of the current run (see the module docstring), or None."""
    label = (((driver or {}).get("metadata") or {}).get("labels") or {}).get(
        LABEL_SPARK_APP_SELECTOR
    )
    if label:
        return str(label)
    ids = Counter(
        str(v)
        for p in executors
        if (v := ((p.get("metadata") or {}).get("labels") or {}).get(LABEL_SPARK_APP_SELECTOR))
    )
    return ids.most_common(1)[0][0] if ids else None


def _exec_order(name: str) -> tuple[int, str]:
    m = _EXEC_NUMBER.search(name)
    return (int(m.group(1)) if m else -1, name)
