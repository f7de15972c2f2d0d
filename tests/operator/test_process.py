"""The operator process itself: health endpoint, Prometheus metrics, JSON logs, leader election."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import httpx
import pytest
import yaml

from .conftest import (
    CRD_DIR,
    EXAMPLES_DIR,
    NAMESPACE,
    Kubectl,
    OperatorProcess,
    StrictApiServer,
    eventually,
)

pytestmark = pytest.mark.timeout(300)  # a backstop: waits have their own deadlines

APPS = "sparkglass.io/v1alpha1/sparkapplications"
SAMPLES = "sparkglass.io/v1alpha1/datasamples"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def get(url: str) -> httpx.Response | None:
    try:
        async with httpx.AsyncClient(timeout=2) as client:
            return await client.get(url)
    except httpx.HTTPError:
        return None


LEASES = "coordination.k8s.io/v1/leases"
#: Short Lease timing so that a test waits seconds, not the production 15 s.
FAST_LEASE = [
    "--lease-duration-seconds", "4",
    "--lease-renew-deadline-seconds", "3",
    "--lease-retry-period-seconds", "0.5",
]  # fmt: skip


def lease(kube: StrictApiServer) -> dict:
    return (kube.stored(LEASES, NAMESPACE, "sparkglass-operator") or {}).get("spec") or {}


def leading(proc: OperatorProcess) -> bool:
    return "leader election: leading" in proc.output()


async def test_two_replicas_elect_one_leader_with_health_metrics_and_json_logs(
    kube: StrictApiServer, kubectl: Kubectl, kubeconfig: Path, tmp_path: Path
) -> None:
    await kubectl.apply(CRD_DIR / "sparkapplication.yaml", CRD_DIR / "datasample.yaml")
    ports = {name: free_port() for name in ("health-a", "metrics-a", "health-b", "metrics-b")}
    replicas = [
        OperatorProcess(
            kubeconfig,
            tmp_path / f"{x}.log",
            [
                "--bind",
                "127.0.0.1",
                "--health-port",
                str(ports[f"health-{x}"]),
                "--metrics-port",
                str(ports[f"metrics-{x}"]),
                *FAST_LEASE,
            ],
            standalone=False,
        )
        for x in ("a", "b")
    ]
    for r in replicas:
        r.start()
    try:
        leader = await eventually(
            lambda: next((r for r in replicas if leading(r)), None), what="a leader"
        )
        (candidate,) = [r for r in replicas if r is not leader]
        await eventually(
            lambda: "leader election: waiting" in candidate.output(), operator=candidate
        )
        assert lease(kube)["holderIdentity"] and lease(kube)["leaseDurationSeconds"] == 4
        await kubectl.apply(EXAMPLES_DIR / "flights-sparkapplication.yaml")
        await eventually(
            lambda: (
                ((kube.stored(APPS, NAMESPACE, "flights") or {}).get("status") or {})
                .get("applicationState", {})
                .get("state")
                == "SUBMITTED"
            ),
            operator=leader,
        )
        x, y = ("a", "b") if leader is replicas[0] else ("b", "a")
        # Both answer the liveness probe: the leader through kopf, the candidate while waiting.
        for name in (x, y):
            health = await eventually(
                lambda n=name: get(f"http://127.0.0.1:{ports['health-' + n]}/healthz"),
                operator=leader,
            )
            assert health.status_code == 200
        # A DataSample for the starting application: picked up (Pending, waiting for it).
        sample = {
            "apiVersion": "sparkglass.io/v1alpha1",
            "kind": "DataSample",
            "metadata": {"name": "early", "namespace": NAMESPACE},
            "spec": {"applicationRef": {"name": "flights"}, "vertex": "parse"},
        }
        resp = await kube.post(
            f"/apis/sparkglass.io/v1alpha1/namespaces/{NAMESPACE}/datasamples", json=sample
        )
        assert resp.status in (200, 201), await resp.text()
        await eventually(
            lambda: (
                ((kube.stored(SAMPLES, NAMESPACE, "early") or {}).get("status") or {}).get("phase")
                == "Pending"
            ),
            operator=leader,
        )
        # The pickup is recorded once the status patch returned, so the phase can show first.
        pickup_url = f"http://127.0.0.1:{ports['metrics-' + x]}/metrics"

        async def pickup_recorded() -> httpx.Response | None:
            m = await get(pickup_url)
            ok = m is not None and m.status_code == 200
            return m if ok and "datasample_pickup_seconds_count 1.0" in m.text else None

        metrics = await eventually(pickup_recorded, timeout=30, operator=leader)
        assert "sparkglass_operator_datasample_pickup_seconds_count 1.0" in metrics.text
        assert 'sparkglass_operator_reconciles_total{kind="SparkApplication",outcome="ok"}' in (
            metrics.text
        )
        assert "sparkglass_operator_driver_pods_created_total 1.0" in metrics.text
        # By status code too: the stand-in answers a create 200 (an API server, 201).
        created = 'sparkglass_operator_api_requests_total{code="201",resource="pods",verb="create"}'
        assert f"{created} 1.0" in metrics.text
        # Only the leader acted: the candidate reconciled nothing and still waits.
        assert '"event": "application state"' in leader.output()
        assert '"event": "application state"' not in candidate.output()
        assert not leading(candidate)
        standby_metrics = await get(f"http://127.0.0.1:{ports['metrics-' + y]}/metrics")
        assert standby_metrics is not None
        assert "sparkglass_operator_driver_pods_created_total 0.0" in standby_metrics.text
        # Structured logs: every line of the operator's output is one JSON object.
        lines = [line for line in leader.output().splitlines() if line.strip()]
        assert lines and all(isinstance(json.loads(line), dict) for line in lines)
        # A clean stop releases the Lease: the candidate leads long before 4 s of silence.
        holder = lease(kube)["holderIdentity"]
        leader.stop()
        await eventually(lambda: leading(candidate), timeout=30, operator=candidate)
        assert lease(kube)["holderIdentity"] not in ("", holder)
        assert lease(kube)["leaseTransitions"] == 1
    finally:
        for r in replicas:
            r.stop()


async def test_cluster_wide_operator_handles_any_namespace(
    kube: StrictApiServer, kubectl: Kubectl, kubeconfig: Path, tmp_path: Path
) -> None:
    await kubectl.apply(CRD_DIR / "sparkapplication.yaml", CRD_DIR / "datasample.yaml")
    for namespace in ("team-a", "team-b"):  # namespaces without Pod Security enforcement
        kube.namespaces[namespace] = {}
    operator = OperatorProcess(kubeconfig, tmp_path / "op.log", ["-A"], standalone=True)
    operator.start()
    try:
        for namespace in ("team-a", "team-b"):
            app = yaml.safe_load((EXAMPLES_DIR / "flights-sparkapplication.yaml").read_text())
            app["metadata"]["namespace"] = namespace
            resp = await kube.post(
                f"/apis/sparkglass.io/v1alpha1/namespaces/{namespace}/sparkapplications", json=app
            )
            assert resp.status in (200, 201), await resp.text()
        for namespace in ("team-a", "team-b"):
            await eventually(
                lambda ns=namespace: kube.stored("v1/pods", ns, "flights-driver"),
                what=f"the driver Pod in {namespace}",
                operator=operator,
            )
            assert kube.names("v1/secrets", namespace) == {"flights-control-token"}
    finally:
        operator.stop()
