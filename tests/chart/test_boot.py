"""The chart's two containers, started as real processes with the chart's own command, args and
environment: their probe paths and metrics ports answer.

Only what cannot work outside a Pod is changed: ports are free loopback ports (other processes
share this machine), the SQLite directory is a temporary one, and the Kubernetes API is a
kubeconfig pointing at a closed loopback port (neither process needs the API to come up and
answer its probes; kopf retries, the service calls the API per request).
"""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from .conftest import NAMESPACE, one

Rendered = Callable[[str], list[dict[str, Any]]]

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "http://127.0.0.1:9"}}]
users: [{name: none, user: {token: not-a-token}}]
contexts: [{name: none, context: {cluster: none, user: none}}]
current-context: none
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _container_env(docs: list[dict[str, Any]], container: dict[str, Any]) -> dict[str, str]:
    """The container's env with secretKeyRefs resolved from the chart's own Secrets."""
    env: dict[str, str] = {}
    for entry in container.get("env", []):
        if "value" in entry:
            env[entry["name"]] = entry["value"]
        elif "fieldRef" in entry["valueFrom"]:  # the Downward API, as the kubelet fills it
            field = entry["valueFrom"]["fieldRef"]["fieldPath"]
            env[entry["name"]] = {"metadata.namespace": NAMESPACE, "metadata.name": "pod-0"}[field]
        else:
            ref = entry["valueFrom"]["secretKeyRef"]
            env[entry["name"]] = one(docs, "Secret", ref["name"])["stringData"][ref["key"]]
    return env


def _start(argv: list[str], env: dict[str, str], tmp: Path) -> subprocess.Popen[bytes]:
    (tmp / "kubeconfig").write_text(KUBECONFIG)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SPARKGLASS_", "KUBE"))}
    full = {**base, **env, "HOME": str(tmp), "KUBECONFIG": str(tmp / "kubeconfig")}
    command = [str(Path(sys.executable).parent / argv[0]), *argv[1:]]
    log = (tmp / "process.log").open("wb")
    return subprocess.Popen(command, env=full, stdout=log, stderr=subprocess.STDOUT, cwd=tmp)


def _wait_ok(proc: subprocess.Popen[bytes], urls: list[str], tmp: Path) -> None:
    deadline = time.monotonic() + 60
    pending = list(urls)
    while pending and time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            if httpx.get(pending[0], timeout=2).status_code == 200:
                pending.pop(0)
                continue
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    if pending:
        log = (tmp / "process.log").read_text(errors="replace")[-3000:]
        pytest.fail(f"{pending[0]} did not answer 200 (exit code {proc.poll()}):\n{log}")


def _stop(proc: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM, as the kubelet sends; the process must exit cleanly within the Pod's grace."""
    proc.terminate()
    try:
        code = proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
        pytest.fail(f"no exit within terminationGracePeriodSeconds ({grace} s) of SIGTERM")
    # uvicorn re-raises SIGTERM after its graceful shutdown, so -15 is a clean exit as well.
    assert code in (0, -signal.SIGTERM), f"exit code {code} after SIGTERM"


def _probe_paths(container: dict[str, Any]) -> dict[str, set[str]]:
    """port name -> HTTP paths the kubelet probes."""
    out: dict[str, set[str]] = {}
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        get = container[probe]["httpGet"]
        out.setdefault(get["port"], set()).add(get["path"])
    return out


def test_service_boots_with_the_chart_environment(rendered: Rendered, tmp_path: Path) -> None:
    docs = rendered("default")
    dep = one(docs, "Deployment", "sparkglass-service")
    container = dep["spec"]["template"]["spec"]["containers"][0]
    env = _container_env(docs, container)
    mount = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}["store"]
    env["SPARKGLASS_DATABASE_URL"] = env["SPARKGLASS_DATABASE_URL"].replace(
        mount, str(tmp_path / "store")
    )
    (tmp_path / "store").mkdir()
    port = _free_port()
    env.update({"SPARKGLASS_HOST": "127.0.0.1", "SPARKGLASS_PORT": str(port)})
    proc = _start([*container["command"], *container["args"]], env, tmp_path)
    try:
        paths = _probe_paths(container)
        assert set(paths) == {"http"}
        monitors = [f"http://127.0.0.1:{port}/metrics"]
        _wait_ok(proc, [f"http://127.0.0.1:{port}{p}" for p in sorted(paths["http"])], tmp_path)
        _wait_ok(proc, monitors, tmp_path)  # what the ServiceMonitor scrapes, without a token
        # The API itself wants a token in kubernetes auth mode.
        r = httpx.get(f"http://127.0.0.1:{port}/api/v1/namespaces/a/applications", timeout=5)
        assert r.status_code == 401
        assert (tmp_path / "store" / "sparkglass.db").is_file()  # the store is where the URL says
    finally:
        if proc.poll() is None:
            _stop(proc, _grace(dep))
    assert "Application shutdown complete" in (tmp_path / "process.log").read_text()


def test_operator_boots_with_the_chart_arguments(rendered: Rendered, tmp_path: Path) -> None:
    docs = rendered("default")
    dep = one(docs, "Deployment", "sparkglass-operator")
    container = dep["spec"]["template"]["spec"]["containers"][0]
    health, metrics = _free_port(), _free_port()
    ports = {"health": health, "metrics": metrics}
    args = [
        a.replace(f"--health-port={_port(container, 'health')}", f"--health-port={health}").replace(
            f"--metrics-port={_port(container, 'metrics')}", f"--metrics-port={metrics}"
        )
        for a in container["args"]
    ]
    assert args != container["args"], "the chart passes --health-port/--metrics-port"
    # The webhook's certificate and key, as the Pod mounts them from the chart's Secret.
    secret = one(docs, "Secret", "sparkglass-operator-webhook-tls")
    mount = next(m for m in container["volumeMounts"] if m["name"] == "webhook-tls")
    webhook = _free_port()
    for key in ("tls.crt", "tls.key"):
        (tmp_path / key).write_bytes(base64.b64decode(secret["data"][key]))
        args = [a.replace(f"{mount['mountPath']}/{key}", str(tmp_path / key)) for a in args]
    args = [
        a.replace(f"--webhook-port={_port(container, 'webhook')}", f"--webhook-port={webhook}")
        for a in args
    ]
    args.append("--bind=127.0.0.1")  # tests only: the Pod binds all interfaces
    proc = _start([*container["command"], *args], _container_env(docs, container), tmp_path)
    try:
        urls = [
            f"http://127.0.0.1:{ports[name]}{path}"
            for name, paths in sorted(_probe_paths(container).items())
            for path in sorted(paths)
        ]
        _wait_ok(proc, [*urls, f"http://127.0.0.1:{metrics}/metrics"], tmp_path)
        _webhook_answers(docs, webhook)
    finally:
        if proc.poll() is None:
            _stop(proc, _grace(dep))


def _webhook_answers(docs: list[dict[str, Any]], port: int) -> None:
    """The API server's call, as the ValidatingWebhookConfiguration says it: HTTPS to the
    Service's DNS name (here at 127.0.0.1), trusting only its caBundle, at its path. An UPDATE
    is admitted without reading anything (the Kubernetes API here is a closed port)."""
    (config,) = [d for d in docs if d["kind"] == "ValidatingWebhookConfiguration"]
    (hook,) = config["webhooks"]
    client = hook["clientConfig"]
    service = client["service"]
    ca = base64.b64decode(client["caBundle"]).decode()
    context = ssl.create_default_context(cadata=ca)
    server_name = f"{service['name']}.{service['namespace']}.svc"
    body = json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u1",
                "kind": {"group": "sparkglass.io", "version": "v1alpha1", "kind": "DataSample"},
                "namespace": NAMESPACE,
                "operation": "UPDATE",
                "object": {"spec": {}},
            },
        }
    ).encode()
    request = (
        f"POST {service['path']} HTTP/1.1\r\nHost: {server_name}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode() + body
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=server_name) as tls,
    ):
        tls.sendall(request)
        answer = b""
        while chunk := tls.recv(65536):
            answer += chunk
    head, _, payload = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    assert json.loads(payload)["response"] == {"uid": "u1", "allowed": True}


def _grace(dep: dict[str, Any]) -> float:
    return float(dep["spec"]["template"]["spec"].get("terminationGracePeriodSeconds", 30))


def _port(container: dict[str, Any], name: str) -> int:
    return int(next(p["containerPort"] for p in container["ports"] if p["name"] == name))
