"""What every handler shares in one operator process (kopf's ``memo``)."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .kube.cluster import Cluster
from .kube.object_cache import ObjectCache
from .kube.work_queue import WorkQueue
from .results import ResultPush
from .settings import OperatorConfig


@dataclass
class SampleRecord:
    """What the operator itself knows about one DataSample (by uid), instead of reading it
    back from the status, which whoever may patch ``datasamples/status`` can write
    (:mod:`.datasample`, "Status is output"). Times are epoch seconds of this process's clock.

    * ``round_id``: the round the driver gave for this DataSample's idempotency key (its uid);
      ``claimed_round_id``: the one a predecessor's status names, until the driver confirms it;
    * ``opened_at``: when that round was opened (or re-learned, after a restart);
    * ``retries`` / ``next_attempt_at``: transient failures counted here, and when to retry;
    * ``ending``: the final phase this process decided on (its :meth:`_finish` arguments)
      while its status write has not succeeded yet: the next step writes it again instead of
      talking to the driver, so a write that lost a race (a 409, a 5xx) never buys another
      attempt nor changes the outcome;
    * ``finished_at``: when this process wrote the final phase, or first saw it final.
    """

    round_id: str | None = None
    #: A round id taken from the status at first sight: not read until the driver confirms it.
    claimed_round_id: str | None = None
    opened_at: float | None = None
    retries: int = 0
    next_attempt_at: float = 0.0
    ending: tuple[str, str, str, dict[str, Any] | None] | None = None
    finished_at: float | None = None


@dataclass
class ApplicationRecord:
    """What this process last read from the API about one SparkApplication, for the passes
    that decide from memory whether a full pass is due (:mod:`.sparkapplication`, "Cost
    follows live work"):

    * ``checked_at``: ``time.monotonic()`` when its last full pass (every object read from
      the API) ended without an error; 0.0: none yet in this process;
    * ``app``: the newest version a full pass read or a status write answered, kept only
      while kopf's index has not caught up with it (then None);
    * ``secrets``: the Secrets its last full pass read (its control Secret, those its spec
      references), by name (None: there was none), reduced to what a memory pass reads:
      metadata, the control token and the certificate; never a private key;
    * ``resolved``: the resolved pipeline (status ``vertices`` and ``edges``) of one
      ``(uid, generation)``, so a memory pass does not plan the pipeline again;
    * ``progress_read_at``: when (epoch seconds) its driver's metrics were last asked for,
      so that a read that wrote nothing (no change, no answer) waits its interval too.
    """

    checked_at: float = 0.0
    app: dict[str, Any] | None = None
    secrets: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    resolved: tuple[tuple[str, Any], dict[str, Any]] | None = None
    progress_read_at: float = 0.0


@dataclass
class OperatorContext:
    """The configuration, the API client, the service's result route (if configured), one
    lock per object so that a queue worker, a change handler and a Pod event never reconcile
    the same object at once within this process (leader election keeps other processes out),
    and the DataSample engine's state:

    * ``samples``: the newest known version of every DataSample (watch events and own writes),
      without ``status.samples`` (the records: no step reads them);
    * ``applications`` / ``driver_pods``: kopf indexes of SparkApplications and of the driver
      Pods (the latter watched with a server-side label selector), keyed by
      ``(namespace, name)``; set by the first DataSample or SparkApplication handler call
      (kopf passes indexes to handlers only), None in unit tests (then reads go to the
      API); ``executor_pods``: the executor Pods Spark created for each application, keyed
      by ``(namespace, app)`` (same watch; set the same way);
    * ``queue``: the DataSample work queue (None until :func:`datasample.start_engine`);
    * ``driver_access``: per DataSample, the driver access found when its round was opened
      and the driver Pod version it was read from (so polls do not read the Secret again);
    * ``records``: the operator's own :class:`SampleRecord` of each DataSample, by uid;
    * ``kubeflow_secrets``: per Kubeflow SparkApplication uid, when (epoch seconds) to look
      at its control Secret again (:func:`datasample.on_kubeflow_application_event`);
    * ``foreign_pipelines``: per other operator's application uid, the driver Pod whose
      pipeline is published;
    * ``app_records``: per SparkApplication ``(namespace, name)``, its
      :class:`ApplicationRecord`.
    """

    config: OperatorConfig
    cluster: Cluster
    results: ResultPush | None = None
    samples: ObjectCache = field(default_factory=lambda: ObjectCache(drop=(("status", "samples"),)))
    applications: Mapping[Any, Any] | None = None
    driver_pods: Mapping[Any, Any] | None = None
    executor_pods: Mapping[Any, Any] | None = None
    queue: WorkQueue | None = None
    engine_task: asyncio.Task[None] | None = None
    driver_access: dict[tuple[str, str], tuple[Any, Any]] = field(default_factory=dict)
    records: dict[str, SampleRecord] = field(default_factory=dict)
    kubeflow_secrets: dict[str, float] = field(default_factory=dict)
    #: Per other operator's application uid, the uid of the driver Pod whose pipeline is
    #: published (:mod:`.foreign_pipeline`): a new driver is asked again.
    foreign_pipelines: dict[str, str] = field(default_factory=dict)
    app_records: dict[tuple[str, str], ApplicationRecord] = field(default_factory=dict)
    #: The periodic full resyncs that may run at once (set on first use: ``sparkapplication``).
    background_passes: asyncio.Semaphore | None = None
    _locks: dict[tuple[str, str, str], asyncio.Lock] = field(
        default_factory=lambda: defaultdict(asyncio.Lock)
    )

    def lock(self, kind: str, namespace: str, name: str) -> asyncio.Lock:
        """The lock of one object (created on first use)."""
        return self._locks[(kind, namespace, name)]

    def forget(self, kind: str, namespace: str, name: str) -> None:
        """Drop the lock of a deleted object."""
        self._locks.pop((kind, namespace, name), None)
