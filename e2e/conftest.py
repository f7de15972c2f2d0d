"""The whole system on one machine, started once for the e2e session.

* a Kubernetes API: the tests' strict API server (``tests/support/kube_apiserver.py``:
  kmock held to a real API server's rules) plus scripted TokenReview/SubjectAccessReview
  replies. It is
  served from a background thread's event loop, so the tests are plain synchronous code and
  every fixture can live for the whole session (a Spark driver takes ~20 s to come up);
* the CRDs applied with a real ``kubectl``;
* the service (``sparkglass serve``, Kubernetes auth and execution modes) and the operator
  (``sparkglass operator run``) as real processes;
* PostgreSQL as the store (a throw-away database, dropped at the end);
* a real Spark driver (``e2e/driver.py``: the flights demo, sampling on) standing in for the
  driver Pod at 127.0.0.1.

With ``KUBECONFIG`` set and ``SPARKGLASS_E2E_REAL_CLUSTER=1`` the suite targets that cluster
instead (see README.md): no emulator, the driver Pod is the operator's real Pod, and the
scenarios that need scripted reviews are skipped.

Everything the tests read goes through the Kubernetes API (the ``kubernetes`` client), never
the emulator's memory, so the same assertions hold on a real cluster.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import httpx
import pytest
import yaml

from tests.support.kube_apiserver import StrictApiServer

REPO = Path(__file__).resolve().parents[1]
E2E = Path(__file__).resolve().parent
GROUP, VERSION = "sparkglass.io", "v1alpha1"
REAL_CLUSTER = bool(os.environ.get("KUBECONFIG")) and (
    os.environ.get("SPARKGLASS_E2E_REAL_CLUSTER") == "1"
)
EMULATOR_ONLY = pytest.mark.skipif(
    REAL_CLUSTER, reason="needs TokenReview/SubjectAccessReview scripted on the emulator"
)
#: Sampling window of the e2e application (the longest a round may ask for, and what the
#: service's rounds use): wide, so that a test can kill the driver while a round is surely
#: open, even on a loaded 2-core machine where a status update can take seconds.
WINDOW = "8s"
#: Sampling window of the kubectl DataSamples that just need a result.
SHORT_WINDOW = "3s"
#: Seconds the service waits for a round's DataSample before it answers TIMEOUT itself
#: (``round_timeout_seconds`` 30 + ``round_grace_seconds``; 30 + 10 by default). Here it
#: outlasts the operator's own give-up time for the application's rounds (WINDOW + its 30 s
#: timeout + 30 s, plus the retries), so that on a loaded machine the REST answer about a
#: round, a crashed driver's included, is the operator's verdict and not the service's.
SERVICE_ROUND_DEADLINE = 150
FINAL = {"Complete", "Partial", "NoData", "Failed", "Disabled", "Abandoned"}

T = TypeVar("T")


def _load(name: str, path: Path) -> ModuleType:
    """Import a helper module of tests/ by file path (tests/ has no __init__.py)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


operator_fixtures = _load("sparkglass_e2e_operator_fixtures", REPO / "tests/operator/conftest.py")
browser = _load("sparkglass_e2e_browser", REPO / "tests/service/browser.py")
NAMESPACE: str = os.environ.get("SPARKGLASS_E2E_NAMESPACE", operator_fixtures.NAMESPACE)
if not REAL_CLUSTER:
    # The emulator lists exactly one test namespace.
    NAMESPACE = operator_fixtures.NAMESPACE


# --------------------------------------------------------------------------- waiting
def eventually(
    check: Callable[[], T | None],
    *,
    timeout: float = 60.0,
    interval: float = 0.25,
    what: str = "condition",
    logs: Callable[[], str] | None = None,
) -> T:
    """Poll ``check()`` until it returns something truthy (returned); fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    tail = logs()[-6000:] if logs else ""
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}\n{tail}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --------------------------------------------------------------------------- the emulator
#: token -> (username, groups): the people the scripted TokenReview knows.
USERS: dict[str, tuple[str, list[str]]] = {
    "alice-token": ("alice", ["data-platform"]),  # may read and sample in the test namespace
    "eve-token": ("eve", []),  # authenticated, no rights
    # The operator's projected token for the service (audience RESULT_AUDIENCE only).
    "operator-service-token": (
        "system:serviceaccount:sparkglass-system:sparkglass-operator",
        ["system:serviceaccounts"],
    ),
}
#: The audience of the token the operator hands results to the service with.
RESULT_AUDIENCE = "sparkglass-service"
#: token -> the audiences it is bound to (the others: the API server's own).
TOKEN_AUDIENCES = {"operator-service-token": [RESULT_AUDIENCE]}
API_AUDIENCE = "https://kubernetes.default.svc"
#: Subjects allowed every verb on sparkglass.io resources in the test namespace.
GRANTED = {"data-platform"}


def _token_review(request: Any) -> dict[str, Any]:
    token = request.data["spec"]["token"]
    # As the API server: a token is valid only for the audiences asked (its own if none).
    asked = request.data["spec"].get("audiences") or [API_AUDIENCE]
    bound = [a for a in asked if a in TOKEN_AUDIENCES.get(token, [API_AUDIENCE])]
    status: dict[str, Any] = {"authenticated": False, "error": "invalid bearer token"}
    if token in USERS and bound:
        name, groups = USERS[token]
        status = {
            "authenticated": True,
            "user": {"username": name, "groups": groups},
            "audiences": bound,
        }
    return {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": request.data["spec"],
        "status": status,
    }


def _subject_access_review(request: Any) -> dict[str, Any]:
    spec = request.data["spec"]
    attrs = spec.get("resourceAttributes") or {}
    subjects = {spec.get("user"), *(spec.get("groups") or [])}
    allowed = (
        bool(subjects & GRANTED)
        and attrs.get("group") == GROUP
        and attrs.get("namespace") == NAMESPACE
    )
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": spec,
        "status": {"allowed": allowed},
    }


class EmulatorThread:
    """Serves the emulator from its own event loop in a daemon thread (tests stay sync)."""

    def __init__(self) -> None:
        self.emulator = StrictApiServer()
        self.emulator.resources.load_bundled()
        self.emulator["post authentication.k8s.io/v1/tokenreviews"] << _token_review
        self.emulator["post authorization.k8s.io/v1/subjectaccessreviews"] << _subject_access_review
        self.url = ""
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="kmock", daemon=True)

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # surfaced by start()
            self._error = exc
            self._ready.set()

    async def _serve(self) -> None:
        import kmock

        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with self.emulator, kmock.Server(self.emulator):
            self.url = str(self.emulator.url).rstrip("/")
            self._ready.set()
            await self._stop.wait()

    def start(self) -> None:
        self._thread.start()
        self._ready.wait(120)
        if self._error or not self.url:
            raise RuntimeError(f"the emulator did not start: {self._error!r}")

    def stop(self) -> None:
        if self._loop and self._stop:
            self._loop.call_soon_threadsafe(self._stop.set)
        # Open watch streams may hold the server's shutdown; the thread is a daemon.
        self._thread.join(10)


# --------------------------------------------------------------------------- the cluster
@dataclass
class Cluster:
    """The Kubernetes API the suite talks to, with kubectl and a client on the same config."""

    kubeconfig: Path
    kubectl_binary: Path
    namespace: str
    emulator: EmulatorThread | None = None
    _api: Any = field(default=None, init=False)

    @property
    def real(self) -> bool:
        return self.emulator is None

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> str:
        done = subprocess.run(
            [str(self.kubectl_binary), "--kubeconfig", str(self.kubeconfig), *args],
            capture_output=True,
            text=True,
            input=input,
            timeout=60,
            check=False,
        )
        if check and done.returncode != 0:
            pytest.fail(f"kubectl {' '.join(args)} failed:\n{done.stderr}")
        return done.stdout

    def apply(self, obj: dict[str, Any]) -> None:
        """``kubectl apply`` one object (the emulator has no schema: no client validation)."""
        self.kubectl("apply", "--validate=false", "-f", "-", input=yaml.safe_dump(obj))

    @property
    def api(self) -> Any:
        if self._api is None:
            from kubernetes import config

            self._api = config.new_client_from_config(config_file=str(self.kubeconfig))
        return self._api

    def get(self, plural: str, name: str) -> dict[str, Any] | None:
        """A sparkglass.io object of the test namespace, or None."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        try:
            obj: dict[str, Any] = client.CustomObjectsApi(self.api).get_namespaced_custom_object(  # type: ignore[assignment]
                GROUP, VERSION, self.namespace, plural, name, _request_timeout=10
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return obj

    def list(self, plural: str, labels: str = "") -> list[dict[str, Any]]:
        from kubernetes import client

        found: dict[str, Any] = client.CustomObjectsApi(self.api).list_namespaced_custom_object(  # type: ignore[assignment]
            GROUP, VERSION, self.namespace, plural, label_selector=labels, _request_timeout=10
        )
        return list(found.get("items") or [])

    def secret_token(self, name: str) -> str | None:
        return self.secret_entry(name, "token")

    def secret_entry(self, name: str, key: str) -> str | None:
        """The decoded ``key`` of Secret ``name``; None when either is missing."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        try:
            secret = client.CoreV1Api(self.api).read_namespaced_secret(
                name, self.namespace, _request_timeout=10
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        value = (secret.data or {}).get(key)
        return base64.b64decode(value).decode() if value else None

    def pod(self, name: str) -> Any:
        """A Pod of the test namespace (the client's model), or None."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        try:
            return client.CoreV1Api(self.api).read_namespaced_pod(
                name, self.namespace, _request_timeout=10
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def set_pod_status(self, name: str, status: dict[str, Any]) -> None:
        """Emulator only: play the kubelet, which reports a Pod's phase and IP."""
        assert self.emulator is not None, "a real cluster has a kubelet"
        r = httpx.patch(
            f"{self.emulator.url}/api/v1/namespaces/{self.namespace}/pods/{name}/status",
            json={"status": status},
            headers={"Content-Type": "application/merge-patch+json"},
            timeout=10,
        )
        assert r.status_code == 200, r.text


def _kubeconfig_for(url: str, path: Path) -> Path:
    """A kubeconfig pointing at the emulator (plain HTTP on 127.0.0.1, a dummy token)."""
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "kmock", "cluster": {"server": url}}],
                "users": [{"name": "e2e", "user": {"token": "service-account-token"}}],
                "contexts": [
                    {
                        "name": "kmock",
                        "context": {"cluster": "kmock", "user": "e2e", "namespace": NAMESPACE},
                    }
                ],
                "current-context": "kmock",
            }
        )
    )
    return path


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The API server (emulated unless REAL_CLUSTER) with the CRDs applied by kubectl."""
    kubectl = operator_fixtures.find_kubectl(tmp_path_factory.mktemp("kubectl"))
    if kubectl is None:
        pytest.skip(
            f"no kubectl: install {operator_fixtures.KUBECTL_LAYER_DIST} or put it on PATH"
        )
    crds = [operator_fixtures.CRD_DIR / f for f in ("sparkapplication.yaml", "datasample.yaml")]
    if REAL_CLUSTER:
        c = Cluster(Path(os.environ["KUBECONFIG"]), kubectl, NAMESPACE)
        if c.kubectl("get", "namespace", NAMESPACE, check=False) == "":
            c.kubectl("create", "namespace", NAMESPACE)
        c.kubectl("apply", *[a for p in crds for a in ("-f", str(p))])
        c.kubectl(
            "wait", "--for=condition=Established", "--timeout=60s", "crd",
            f"sparkapplications.{GROUP}", f"datasamples.{GROUP}",
        )
        yield c
        # Leave the cluster as found (the CRDs stay: other things may use them).
        for kind in ("datasamples", "sparkapplications"):
            c.kubectl(
                "delete", kind, "-n", NAMESPACE, "-l", "sparkglass.io/e2e=true",
                "--ignore-not-found", "--wait=false", check=False,
            )
        return
    emulator = EmulatorThread()
    emulator.start()
    try:
        kubeconfig = _kubeconfig_for(emulator.url, tmp_path_factory.mktemp("kube") / "config")
        c = Cluster(kubeconfig, kubectl, NAMESPACE, emulator)
        c.kubectl("apply", "--validate=false", *[a for p in crds for a in ("-f", str(p))])
        yield c
    finally:
        emulator.stop()


# --------------------------------------------------------------------------- the store
@pytest.fixture(scope="session")
def store_url(postgres_database: Callable[[str], AbstractContextManager[str]]) -> Iterator[str]:
    """A throw-away PostgreSQL database (SQLAlchemy URL), dropped at the end."""
    with postgres_database("sg_e2e") as url:
        yield url


def query(store_url: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """Rows of ``sql`` run directly on the store's PostgreSQL tables."""
    import psycopg

    with psycopg.connect(store_url.replace("+psycopg", ""), connect_timeout=5) as conn:
        return list(conn.execute(sql, params).fetchall())  # type: ignore[arg-type]


# --------------------------------------------------------------------------- processes
class Process:
    """A child process with its output in a log file; stopped with SIGTERM, then SIGKILL."""

    def __init__(self, name: str, args: list[str], log: Path, env: dict[str, str]) -> None:
        self.name, self.args, self.log, self.env = name, args, log, env
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            # Its own process group: signals reach its children too (a driver's Spark JVM).
            self.proc = subprocess.Popen(
                self.args,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=str(REPO),
                start_new_session=True,
            )

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: what a crashed container looks like (no clean-up)."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self, grace: float = 5.0) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=grace)
        self.kill()  # whatever of the group is left (an orphaned JVM, say)

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def _child_env(cluster: Cluster, **extra: str) -> dict[str, str]:
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "PYTHONUNBUFFERED": "1"}
    env.pop("KUBERNETES_SERVICE_HOST", None)  # never mistake this machine for a Pod
    env.update(extra)
    return env


@dataclass
class System:
    cluster: Cluster
    store_url: str
    service_url: str
    service: Process
    operator: Process

    def logs(self) -> str:
        return (
            f"--- operator\n{self.operator.output()[-3000:]}\n"
            f"--- service\n{self.service.output()[-3000:]}"
        )

    def rest(self, path: str, token: str | None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.get(f"{self.service_url}{path}", headers=headers, timeout=30)

    def data_sample_path(self, app: str, vertex: str) -> str:
        return (
            f"/api/v1/namespaces/{self.cluster.namespace}/applications/{app}"
            f"/vertices/{vertex}/data-sample"
        )


@pytest.fixture(scope="session")
def system(
    cluster: Cluster, store_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[System]:
    """The service, then the operator (the service migrates the store first); the operator
    hands its results to the service with a token of the service's audience."""
    logs = tmp_path_factory.mktemp("logs")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    writer, token = USERS["operator-service-token"][0], "operator-service-token"
    if REAL_CLUSTER:
        writer = f"system:serviceaccount:{cluster.namespace}:default"
        token = cluster.kubectl(
            "create", "token", "default", "-n", cluster.namespace, "--audience", RESULT_AUDIENCE
        ).strip()
    token_file = logs / "operator-service-token"
    token_file.write_text(token)
    service = Process(
        "service",
        [sys.executable, "-m", "sparkglass", "serve", "--host", "127.0.0.1", "--port", str(port),
         "--auth-mode", "kubernetes", "--execution-mode", "kubernetes",
         "--database-url", store_url],
        logs / "service.log",
        _child_env(
            cluster,
            SPARKGLASS_PUBLIC_URL=url,
            SPARKGLASS_RESULT_WRITERS=writer,
            SPARKGLASS_RESULT_AUDIENCE=RESULT_AUDIENCE,
            SPARKGLASS_POLL_INTERVAL_SECONDS="0.25",
            SPARKGLASS_ROUND_TIMEOUT_SECONDS="30",
            SPARKGLASS_ROUND_GRACE_SECONDS=str(SERVICE_ROUND_DEADLINE - 30),
            SPARKGLASS_AUDIT_FLUSH_SECONDS="0.2",
            # Short decision caches: an e2e run is about the answers, not the caching.
            SPARKGLASS_AUTHN_CACHE_SECONDS="1",
            SPARKGLASS_AUTHZ_ALLOW_CACHE_SECONDS="1",
            SPARKGLASS_AUTHZ_DENY_CACHE_SECONDS="1",
        ),
    )
    operator = Process(
        "operator",
        [sys.executable, "-m", "sparkglass", "operator", "run", "--namespace", cluster.namespace,
         "--standalone", "--health-port", "0", "--metrics-port", "0",
         "--resync-seconds", "1", "--poll-seconds", "0.5", "--log-format", "json",
         "--service-url", url, "--service-token-file", str(token_file)],
        logs / "operator.log",
        _child_env(cluster),
    )
    service.start()
    try:

        def healthy() -> bool:
            if not service.alive:
                pytest.fail(f"the service exited:\n{service.output()[-4000:]}")
            with contextlib.suppress(httpx.HTTPError):
                return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
            return False

        eventually(healthy, timeout=60, what="the service", logs=service.output)
        operator.start()
        yield System(cluster, store_url, url, service, operator)
    finally:
        operator.stop(grace=2)
        service.stop()


# --------------------------------------------------------------------------- applications
def example(name: str) -> dict[str, Any]:
    body: dict[str, Any] = yaml.safe_load((operator_fixtures.EXAMPLES_DIR / name).read_text())
    return body


def application_body(name: str, *, sampling: bool, control_port: int) -> dict[str, Any]:
    """The flights example SparkApplication, renamed, in the test namespace."""
    body = example("flights-sparkapplication.yaml")
    body["metadata"] = {
        "name": name,
        "namespace": NAMESPACE,
        "labels": {"sparkglass.io/e2e": "true"},
    }
    if REAL_CLUSTER and os.environ.get("SPARKGLASS_E2E_IMAGE"):
        body["spec"]["image"] = os.environ["SPARKGLASS_E2E_IMAGE"]
    body["spec"]["sampling"].update(
        enabled=sampling, samplingWindow=WINDOW, controlPort=control_port
    )
    return body


def sample_body(
    name: str, app: str, vertex: str, window: str = SHORT_WINDOW, **spec: Any
) -> dict[str, Any]:
    body = example("flights-datasample.yaml")
    body["metadata"] = {
        "name": name,
        "namespace": NAMESPACE,
        "labels": {"sparkglass.io/e2e": "true"},
    }
    body["spec"].pop("ttlSecondsAfterFinished", None)  # kept for the assertions
    body["spec"].update(applicationRef={"name": app}, vertex=vertex, samplingWindow=window, **spec)
    return body


def app_status(cluster: Cluster, name: str) -> dict[str, Any]:
    return (cluster.get("sparkapplications", name) or {}).get("status") or {}


def sample_status(cluster: Cluster, name: str) -> dict[str, Any]:
    return (cluster.get("datasamples", name) or {}).get("status") or {}


def wait_final(system: System, name: str, timeout: float = 90) -> dict[str, Any]:
    def final() -> dict[str, Any] | None:
        st = sample_status(system.cluster, name)
        return st if st.get("phase") in FINAL else None

    return eventually(final, timeout=timeout, what=f"DataSample {name}", logs=system.logs)


@dataclass
class RunningApp:
    name: str
    driver: Process | None  # None on a real cluster: the driver is the operator's Pod


@pytest.fixture(scope="session")
def flights(system: System, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningApp]:
    """The flights SparkApplication, RUNNING, its driver a real Spark process at 127.0.0.1."""
    cluster = system.cluster
    port = free_port() if not cluster.real else 4045
    cluster.apply(application_body("flights", sampling=True, control_port=port))
    if cluster.real:
        # The operator's driver Pod runs the demo image; the kubelet reports it Running.
        eventually(
            lambda: app_status(cluster, "flights").get("applicationState", {}).get("state")
            == "RUNNING",
            timeout=300,
            what="flights RUNNING",
            logs=system.logs,
        )
        yield RunningApp("flights", None)
        return
    token = eventually(
        lambda: cluster.secret_token("flights-control-token"),
        what="the control token Secret",
        logs=system.logs,
    )
    workdir = tmp_path_factory.mktemp("driver")
    # What the driver Pod mounts from the Secret: the endpoint serves HTTPS with it.
    tls_dir = workdir / "control-tls"
    tls_dir.mkdir()
    for key in ("tls.crt", "tls.key"):
        pem = cluster.secret_entry("flights-control-token", key)
        assert pem, f"the control Secret has no {key}"
        (tls_dir / key).write_text(pem)
    (tls_dir / "tls.key").chmod(0o400)
    driver = Process(
        "driver",
        [sys.executable, str(E2E / "driver.py"), "--port", str(port), "--window", WINDOW,
         "--workdir", str(workdir / "demo"), "--tls-dir", str(tls_dir)],
        workdir / "driver.log",
        {**os.environ, "SPARKGLASS_CONTROL_TOKEN": token, "PYTHONUNBUFFERED": "1"},
    )
    driver.start()
    try:

        def ready() -> bool:
            if not driver.alive:
                pytest.fail(f"the driver exited:\n{driver.output()[-4000:]}")
            return "READY" in driver.output()

        eventually(ready, timeout=180, interval=0.5, what="the driver's micro-batches",
                   logs=driver.output)
        # Play the kubelet: the driver Pod the operator created is Running at 127.0.0.1.
        eventually(lambda: cluster.pod("flights-driver"), what="the driver Pod", logs=system.logs)
        cluster.set_pod_status("flights-driver", {"phase": "Running", "podIP": "127.0.0.1"})

        def running() -> bool:
            st = app_status(cluster, "flights")
            return (st.get("applicationState") or {}).get("state") == "RUNNING" and (
                (st.get("driverInfo") or {}).get("controlEndpoint") == f"https://127.0.0.1:{port}"
            )

        eventually(running, what="flights RUNNING", logs=system.logs)
        yield RunningApp("flights", driver)
    finally:
        driver.stop(grace=10)


def records_of(result: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for s in result.get("samples") or [] for r in s.get("records") or []]


def flight_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    return [json.loads(r["data"]) for r in records_of(result)]
