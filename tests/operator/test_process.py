"""The operator process itself: health endpoint, Prometheus metrics, JSON logs, peering."""

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
    SparkglassEmulator,
    eventually,
)

pytestmark = pytest.mark.timeout(300)  # a backstop: waits have their own deadlines

APPS = "sparkglass.io/v1alpha1/sparkapplications"


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


async def eventually_one_peer(
    kube: SparkglassEmulator, peers: str, leader: OperatorProcess
) -> None:
    await eventually(
        lambda: len((kube.stored(peers, NAMESPACE, "sparkglass") or {}).get("status") or {}) == 1,
        what="the leader's keep-alive",
        operator=leader,
    )


async def test_two_peered_replicas_one_acts_with_health_metrics_and_json_logs(
    kube: SparkglassEmulator, kubectl: Kubectl, kubeconfig: Path, tmp_path: Path
) -> None:
    await kubectl.apply(
        CRD_DIR / "sparkapplication.yaml",
        CRD_DIR / "datasample.yaml",
        CRD_DIR / "kopf-peering.yaml",
    )
    peering = {
        "apiVersion": "kopf.dev/v1",
        "kind": "KopfPeering",
        "metadata": {"name": "sparkglass"},
    }
    await kubectl(
        "apply", "--validate=false", "-n", NAMESPACE, "-f", "-", input=yaml.safe_dump(peering)
    )
    ports = {name: free_port() for name in ("health-a", "metrics-a", "health-b", "metrics-b")}
    leader = OperatorProcess(
        kubeconfig,
        tmp_path / "leader.log",
        ["--priority", "10", "--bind", "127.0.0.1", "--health-port", str(ports["health-a"]),
         "--metrics-port", str(ports["metrics-a"])],
        standalone=False,
    )  # fmt: skip
    standby = OperatorProcess(
        kubeconfig,
        tmp_path / "standby.log",
        ["--priority", "5", "--bind", "127.0.0.1", "--health-port", str(ports["health-b"]),
         "--metrics-port", str(ports["metrics-b"])],
        standalone=False,
    )  # fmt: skip
    peers = "kopf.dev/v1/kopfpeerings"
    standby.start()
    try:
        # The standby first (alone, it acts), then the leader: on the leader's keep-alive the
        # standby finds a higher-priority peer alive and pauses. (Started the other way round,
        # kmock's watch misses the peering object's earlier versions.)
        await eventually_one_peer(kube, peers, standby)
        leader.start()
        await eventually(
            lambda: "Pausing operations in favour of" in standby.output(),
            what="the standby to pause",
            operator=standby,
        )
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
        health = await eventually(
            lambda: get(f"http://127.0.0.1:{ports['health-a']}/healthz"), operator=leader
        )
        assert health.status_code == 200
        metrics = await get(f"http://127.0.0.1:{ports['metrics-a']}/metrics")
        assert metrics is not None and metrics.status_code == 200
        assert 'sparkglass_operator_reconciles_total{kind="SparkApplication",outcome="ok"}' in (
            metrics.text
        )
        assert "sparkglass_operator_driver_pods_created_total 1.0" in metrics.text
        # Only the leader acted: the standby reconciled nothing.
        assert '"event": "application state"' in leader.output()
        assert '"event": "application state"' not in standby.output()
        standby_metrics = await get(f"http://127.0.0.1:{ports['metrics-b']}/metrics")
        assert standby_metrics is not None
        assert "sparkglass_operator_driver_pods_created_total 0.0" in standby_metrics.text
        # Structured logs: every line of the operator's output is one JSON object.
        lines = [line for line in leader.output().splitlines() if line.strip()]
        assert lines and all(isinstance(json.loads(line), dict) for line in lines)
    finally:
        leader.stop()
        standby.stop()


async def test_cluster_wide_operator_handles_any_namespace(
    kube: SparkglassEmulator, kubectl: Kubectl, kubeconfig: Path, tmp_path: Path
) -> None:
    await kubectl.apply(CRD_DIR / "sparkapplication.yaml", CRD_DIR / "datasample.yaml")
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
