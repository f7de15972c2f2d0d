"""The operator process: kopf settings, handler registry, leader election, health, metrics, run.

``sparkglass operator run`` calls :func:`run`. Namespace-scoped with ``namespaces`` (one or
more, globs allowed), cluster-wide otherwise. Replicas elect a leader on a
``coordination.k8s.io`` Lease (:mod:`.leader_election`): only the leader runs kopf; the others
wait as candidates and answer the liveness endpoint meanwhile. A leader that loses the Lease
exits (status 1) so nothing it started keeps acting; one stopped cleanly releases it.
``standalone`` skips the election (one replica, or tests). kopf itself always runs standalone:
its own peering pauses every replica of equal priority, which is no failover.

Health: the liveness endpoint (``liveness_endpoint``, e.g. ``http://0.0.0.0:8080/healthz``)
answers 200 while a candidate waits and, once leading, while kopf's tasks run. Metrics:
Prometheus text on ``metrics_port``. Handler progress is kept in ``sparkglass.io/*``
annotations, never in ``status.kopf`` (the CRDs' structural schemas would prune it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import aiohttp.web
import kopf
import structlog
from prometheus_client import start_http_server

from . import admission, apache_spark, datasample, executors, kubeflow, sparkapplication
from .context import OperatorContext
from .kube.cluster import Cluster
from .kube.diff_base import SpecDigestStorage
from .kube.leader_election import LeaderElector
from .results import ResultPush
from .settings import OperatorConfig

log = structlog.get_logger(__name__)

#: Finalizer kopf puts on handled objects (so timers stop cleanly before deletion).
FINALIZER = "sparkglass.io/operator"


def build_registry(
    config: OperatorConfig,
    *,
    kubeflow_applications: bool = False,
    apache_spark_applications: bool = False,
) -> kopf.OperatorRegistry:
    """A registry holding the SparkApplication and DataSample handlers (and the event
    handler of Kubeflow's SparkApplications when ``kubeflow_applications``, of the Apache
    Spark operator's when ``apache_spark_applications``)."""
    registry = kopf.OperatorRegistry()
    # A registry of our own has none of kopf's default login handlers: credentials come the
    # way the kubernetes client finds them (in-cluster service account, else the kubeconfig).
    kopf.on.login(registry=registry, id="login")(login)
    sparkapplication.register(registry, resync_seconds=config.resync_seconds)
    datasample.register(
        registry,
        kubeflow_applications=kubeflow_applications,
        apache_spark_applications=apache_spark_applications,
    )
    return registry


def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """kopf login handler: the ``kubernetes`` client's credentials."""
    return kopf.login_via_client(**kwargs)


def build_settings(config: OperatorConfig) -> kopf.OperatorSettings:
    """kopf settings: annotation-only progress storage, our finalizer, no peering, posting,
    the Pod watch's label selector."""
    settings = kopf.OperatorSettings()
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="sparkglass.io")
    settings.persistence.diffbase_storage = SpecDigestStorage(
        prefix="sparkglass.io", key="last-handled-configuration"
    )
    # One actor is the Lease's business (kube/leader_election.py), not kopf's peering.
    settings.peering.standalone = True
    settings.peering.mandatory = False
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
    # Only Pods labelled with an application (the operator's driver Pods and the executor
    # Pods Spark labels for it), selected by the API server: not every Pod's events. kopf
    # opens one watch per resource, so both share this selector; handlers filter further.
    # kopf matches a key by its parts: ("v1", "pods") selects core Pods, while the one string
    # "v1/pods" would name a resource that matches nothing (and the watch goes unfiltered).
    settings.watching.label_selectors["v1", "pods"] = executors.POD_WATCH_SELECTOR
    return settings


async def operate(config: OperatorConfig, *, stop_flag: asyncio.Event | None = None) -> None:
    """Run the operator until ``stop_flag`` is set or the process is signalled; with leader
    election, first wait to lead. Raises ``SystemExit(1)`` when leadership is lost."""
    if not config.standalone and config.election is None:
        raise ValueError("no leader election Lease configured: give election, or standalone")
    cluster = Cluster(qps=config.api_qps, burst=config.api_burst)
    results = (
        ResultPush(config.result_service_url, config.service_token_file, config.service_ca_file)
        if config.result_service_url
        else None
    )
    memo = OperatorContext(config=config, cluster=cluster, results=results)
    if config.metrics_port:
        start_http_server(config.metrics_port, addr=config.metrics_address)
    log.info(
        "operator starting",
        namespaces=list(config.namespaces) or "all",
        standalone=config.standalone,
        lease=None if config.election is None else config.election.name,
        metrics_port=config.metrics_port,
        liveness=config.liveness_endpoint,
        webhook_port=None if config.webhook is None else config.webhook.port,
    )
    async with contextlib.AsyncExitStack() as stack:
        if config.webhook is not None:
            # Every replica answers admission reviews, the leader or not: the API server
            # calls whichever one the Service picks (kopf's own webhook server runs only in
            # kopf, which only the leader runs).
            await stack.enter_async_context(admission.serve(memo, config.webhook))
        await _lead_and_operate(config, cluster, memo, stop_flag)


async def _lead_and_operate(
    config: OperatorConfig,
    cluster: Cluster,
    memo: OperatorContext,
    stop_flag: asyncio.Event | None,
) -> None:
    elector = None
    if not config.standalone:
        assert config.election is not None  # checked by operate()
        # Renewals on a client of their own: their own thread and connection, never queued
        # behind reconcile calls nor held by the QPS limit, and a 429 left to the elector's
        # own retry period (a Retry-After could outlast the renew deadline).
        lease_cluster = Cluster(
            executor=ThreadPoolExecutor(1, thread_name_prefix="sparkglass-lease"),
            throttled_attempts=1,
        )
        elector = LeaderElector(lease_cluster, config.election)
        health = await _serve_candidate_health(config.liveness_endpoint)
        try:
            await elector.acquire()
        finally:
            if health is not None:
                await health.cleanup()  # kopf's own liveness endpoint takes the port
    stop = stop_flag if stop_flag is not None else asyncio.Event()
    lost = asyncio.Event()
    holding = asyncio.create_task(_hold(elector, stop, lost)) if elector is not None else None
    try:
        # Kubeflow spark-operator applications are watched only where the operator may list
        # them (chart value kubeflow.enabled): kopf stops on a watch it is refused.
        kubeflow_off = await kubeflow.readable(cluster, config.namespaces)
        log.info(
            "kubeflow spark-operator applications", watched=kubeflow_off is None, why=kubeflow_off
        )
        # Likewise the Apache Spark operator's (chart value apacheSparkOperator.enabled).
        apache_off = await apache_spark.APACHE_SPARK.readable(cluster, config.namespaces)
        log.info("apache spark operator applications", watched=apache_off is None, why=apache_off)
        registry = build_registry(
            config,
            kubeflow_applications=kubeflow_off is None,
            apache_spark_applications=apache_off is None,
        )
        await kopf.operator(
            registry=registry,
            settings=build_settings(config),
            clusterwide=config.clusterwide,
            namespaces=list(config.namespaces),
            standalone=True,
            liveness_endpoint=config.liveness_endpoint,
            memo=memo,
            stop_flag=stop,
        )
    finally:
        if holding is not None:
            holding.cancel()
        if elector is not None and not lost.is_set():
            await elector.release()
        if memo.results is not None:
            await memo.results.close()
        cluster.close()
    if lost.is_set():
        raise SystemExit(1)


async def _hold(elector: LeaderElector, stop: asyncio.Event, lost: asyncio.Event) -> None:
    """Renew the Lease; when leadership is lost, stop the operator at once."""
    await elector.hold()
    lost.set()
    stop.set()


async def _serve_candidate_health(endpoint: str | None) -> aiohttp.web.AppRunner | None:
    """Answer ``/healthz`` (200) while this replica waits to lead, on kopf's liveness address
    (a waiting candidate is healthy; the probe must not restart it)."""
    if not endpoint:
        return None
    url = urllib.parse.urlsplit(endpoint)
    app = aiohttp.web.Application()

    async def healthz(_: aiohttp.web.Request) -> aiohttp.web.Response:
        return aiohttp.web.json_response({"status": "waiting to lead"})

    app.router.add_get(url.path or "/", healthz)
    runner = aiohttp.web.AppRunner(app)
    await runner.setup()
    await aiohttp.web.TCPSite(runner, url.hostname, url.port or 80).start()
    return runner


def run(config: OperatorConfig) -> None:
    """Blocking entry point of ``sparkglass operator run``."""
    asyncio.run(operate(config))
