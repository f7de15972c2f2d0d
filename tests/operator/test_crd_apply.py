"""``python -m sparkglass.operator.crd_apply``: the chart's CRD upgrade hook, run for real.

kmock does not implement server-side apply, so a small HTTP server on loopback plays the
API server's CRD endpoint: it records each request, stores what is applied, and reports a
CRD ``Established`` only after a few reads (as a real API server does once the CRD's
storage is ready). The module runs as the hook Job runs it: a separate process with a
kubeconfig.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp.web
import pytest
import yaml

from sparkglass.operator import crd_apply

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(120)


@dataclass
class FakeCrdApi:
    """``/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}``: PATCH and GET."""

    stored: dict[str, dict[str, Any]] = field(default_factory=dict)
    patches: list[tuple[str, str, dict[str, str], dict[str, Any]]] = field(default_factory=list)
    reads: dict[str, int] = field(default_factory=dict)
    reads_until_established: int = 2
    refuse: str | None = None  # a CRD name answered 422
    url: str = ""

    async def patch(self, request: aiohttp.web.Request) -> aiohttp.web.Response:
        name = request.match_info["name"]
        body = json.loads(await request.read())
        self.patches.append((name, request.content_type, dict(request.query), body))
        if name == self.refuse:
            return aiohttp.web.json_response(
                {"kind": "Status", "message": f"CustomResourceDefinition {name} is invalid"},
                status=422,
            )
        self.stored[name] = body
        return aiohttp.web.json_response(body)

    async def get(self, request: aiohttp.web.Request) -> aiohttp.web.Response:
        name = request.match_info["name"]
        if name not in self.stored:
            return aiohttp.web.json_response({"kind": "Status"}, status=404)
        self.reads[name] = self.reads.get(name, 0) + 1
        ready = self.reads[name] >= self.reads_until_established
        status = "True" if ready else "False"
        conditions = [{"type": "Established", "status": status}]
        return aiohttp.web.json_response(
            {**self.stored[name], "status": {"conditions": conditions}}
        )


@pytest.fixture()
async def api() -> AsyncIterator[FakeCrdApi]:
    fake = FakeCrdApi()
    app = aiohttp.web.Application()
    path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
    app.router.add_patch(path, fake.patch)
    app.router.add_get(path, fake.get)
    runner = aiohttp.web.AppRunner(app)
    await runner.setup()
    site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    fake.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    yield fake
    await runner.cleanup()


async def run_hook(api: FakeCrdApi, tmp_path: Path, *args: str) -> tuple[int, str]:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": api.url}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    env["KUBECONFIG"] = str(kubeconfig)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "sparkglass.operator.crd_apply",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=env,
        cwd=str(tmp_path),
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 90)
    return int(proc.returncode or 0), out.decode()


async def test_applies_the_packaged_crds_server_side_and_waits_until_established(
    api: FakeCrdApi, tmp_path: Path
) -> None:
    code, out = await run_hook(api, tmp_path, "--timeout-seconds=30")
    assert code == 0, out
    packaged = {c["metadata"]["name"]: c for c in crd_apply.load_crds(crd_apply.packaged_crd_dir())}
    assert set(packaged) == {"sparkapplications.sparkglass.io", "datasamples.sparkglass.io"}
    # The packaged CRDs are the repository's (and so the chart's) byte for byte.
    for path in (REPO / "crds").glob("*.yaml"):
        assert (crd_apply.packaged_crd_dir() / path.name).read_bytes() == path.read_bytes()
    assert {name for name, *_ in api.patches} == set(packaged)
    for name, content_type, query, body in api.patches:
        assert content_type == "application/apply-patch+yaml"
        assert query == {"fieldManager": "sparkglass-crd-upgrade", "force": "true"}
        assert body == packaged[name]  # the whole CRD, as the file holds it
    assert all(api.reads[name] >= api.reads_until_established for name in packaged), api.reads
    assert out.count("applied (server-side) and established") == 2


async def test_a_refused_crd_or_one_never_established_fails_the_hook(
    api: FakeCrdApi, tmp_path: Path
) -> None:
    api.refuse = "datasamples.sparkglass.io"
    code, out = await run_hook(api, tmp_path)
    assert code == 1 and "CustomResourceDefinition datasamples.sparkglass.io is invalid" in out
    api.refuse, api.reads_until_established = None, 10**6
    code, out = await run_hook(api, tmp_path, "--timeout-seconds=1")
    assert code == 1 and "not Established within 1 s" in out


def test_only_sparkglass_crds_are_applied(tmp_path: Path) -> None:
    (tmp_path / "x.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: not-a-crd}\n"
    )
    with pytest.raises(ValueError, match=r"x.yaml: ConfigMap 'not-a-crd' is not a"):
        crd_apply.load_crds(tmp_path)
    (tmp_path / "x.yaml").write_text(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n"
        "metadata: {name: widgets.example.com}\n"
    )
    with pytest.raises(ValueError, match=r"widgets\.example\.com"):
        crd_apply.load_crds(tmp_path)
    (tmp_path / "x.yaml").unlink()
    with pytest.raises(ValueError, match="no CRD in"):
        crd_apply.load_crds(tmp_path)
