"""The operator process: kopf settings, handler registry, health, metrics, run.

``sparkglass operator run`` calls :func:`run`. Namespace-scoped with ``namespaces`` (one or
more, globs allowed), cluster-wide otherwise. Two replicas peer through kopf's
``KopfPeering`` / ``ClusterKopfPeering`` object named ``peering_name`` (``crds/kopf-peering.yaml``):
only the one with the highest priority acts, the other stands by. ``standalone`` skips
peering (one replica, or tests).

Health: kopf's liveness endpoint (``liveness_endpoint``, e.g. ``http://0.0.0.0:8080/healthz``)
answers 200 while the operator's tasks run. Metrics: Prometheus text on ``metrics_port``.
Handler progress is kept in ``sparkglass.io/*`` annotations, never in ``status.kopf``
(the CRDs' structural schemas would prune it).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf
import structlog
from prometheus_client import start_http_server

from . import datasample, sparkapplication
from .cluster import Cluster
from .context import OperatorContext
from .results import ResultStore
from .settings import OperatorConfig

log = structlog.get_logger(__name__)

#: Finalizer kopf puts on handled objects (so timers stop cleanly before deletion).
FINALIZER = "sparkglass.io/operator"


def build_registry(config: OperatorConfig) -> kopf.OperatorRegistry:
    """A registry holding the SparkApplication and DataSample handlers."""
    registry = kopf.OperatorRegistry()
    # A registry of our own has none of kopf's default login handlers: credentials come the
    # way the kubernetes client finds them (in-cluster service account, else the kubeconfig).
    kopf.on.login(registry=registry, id="login")(login)
    sparkapplication.register(registry, resync_seconds=config.resync_seconds)
    datasample.register(registry, poll_seconds=config.poll_seconds)
    return registry


def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """kopf login handler: the ``kubernetes`` client's credentials."""
    return kopf.login_via_client(**kwargs)


def build_settings(config: OperatorConfig) -> kopf.OperatorSettings:
    """kopf settings: annotation-only progress storage, our finalizer, peering, posting."""
    settings = kopf.OperatorSettings()
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="sparkglass.io")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="sparkglass.io", key="last-handled-configuration"
    )
    settings.peering.name = config.peering_name
    settings.peering.priority = config.priority
    settings.peering.standalone = config.standalone
    settings.peering.mandatory = not config.standalone
    settings.peering.clusterwide = config.clusterwide
    # Exact namespaces need no cluster-wide reads: no namespace or CRD watching (the CRDs are
    # installed before the operator; a namespace-scoped Role is then enough).
    exact = not config.clusterwide and not any(set("*?[!") & set(ns) for ns in config.namespaces)
    settings.scanning.disabled = exact
    # Our own Events say what happened; kopf's per-handler log lines would only add noise.
    settings.posting.level = logging.WARNING
    # A timer caught mid-pass when its object is deleted gets half a second to finish, then
    # is polled every second (kopf's default is a minute, delaying the finalizer removal).
    settings.background.instant_exit_timeout = 0.5
    settings.background.cancellation_polling = 1.0
    settings.networking.request_timeout = 60
    settings.watching.server_timeout = 300
    return settings


async def operate(config: OperatorConfig, *, stop_flag: asyncio.Event | None = None) -> None:
    """Run the operator until ``stop_flag`` is set or the process is signalled."""
    cluster = Cluster()
    store = ResultStore(config.store_url) if config.store_url else None
    memo = OperatorContext(config=config, cluster=cluster, store=store)
    # In the background: the operator serves while the store opens.
    warming = asyncio.create_task(asyncio.to_thread(store.warm)) if store is not None else None
    if config.metrics_port:
        start_http_server(config.metrics_port, addr=config.metrics_address)
    log.info(
        "operator starting",
        namespaces=list(config.namespaces) or "all",
        standalone=config.standalone,
        peering=None if config.standalone else config.peering_name,
        metrics_port=config.metrics_port,
        liveness=config.liveness_endpoint,
    )
    try:
        await kopf.operator(
            registry=build_registry(config),
            settings=build_settings(config),
            clusterwide=config.clusterwide,
            namespaces=list(config.namespaces),
            standalone=config.standalone,
            priority=config.priority,
            peering_name=None if config.standalone else config.peering_name,
            liveness_endpoint=config.liveness_endpoint,
            memo=memo,
            stop_flag=stop_flag,
        )
    finally:
        if warming is not None and not warming.done():
            warming.cancel()
        cluster.close()


def run(config: OperatorConfig) -> None:
    """Blocking entry point of ``sparkglass operator run``."""
    asyncio.run(operate(config))
