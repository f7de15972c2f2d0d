"""Server-side apply of sparkglass's CRDs: the chart's optional CRD upgrade hook.

Helm installs a chart's ``crds/`` on the first install and never upgrades them, so a
``helm upgrade`` to a release whose operator expects new CRD fields would run it against the
old schemas (the API server prunes the fields it does not know). With
``crds.upgradeHook.enabled`` the chart runs this module in a ``pre-install,pre-upgrade`` hook
Job, from the operator's own image, before anything else of the release changes: it applies
the CRDs packaged with that image as ``kubectl apply --server-side --force-conflicts`` would
(the image has no kubectl) and waits until each is ``Established`` (docs/gitops.md).

Usage: ``python -m sparkglass.operator.crd_apply [--dir DIR] [--timeout-seconds S]``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.resources
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from . import names
from .kube.cluster import ApiError, Cluster

#: The field manager the hook applies with (``metadata.managedFields`` shows it).
FIELD_MANAGER = "sparkglass-crd-upgrade"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def packaged_crd_dir() -> Path:
    """The CRDs shipped with the installed package (``src/sparkglass/crds`` → ``crds/``)."""
    return Path(str(importlib.resources.files("sparkglass") / "crds"))


def load_crds(directory: Path) -> list[dict[str, Any]]:
    """Every CRD in ``directory``'s ``*.yaml`` files, in file order. Raises ``ValueError``
    naming the file for anything that is not a sparkglass.io CustomResourceDefinition (the
    hook's rights cover those only), or when there is none."""
    found: list[dict[str, Any]] = []
    for path in sorted(directory.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc:
                continue
            name = str((doc.get("metadata") or {}).get("name") or "")
            if doc.get("kind") != "CustomResourceDefinition" or not name.endswith(
                f".{names.GROUP}"
            ):
                raise ValueError(
                    f"{path.name}: {doc.get('kind')} {name!r} is not a CustomResourceDefinition "
                    f"of {names.GROUP}"
                )
            found.append(doc)
    if not found:
        raise ValueError(f"no CRD in {directory}")
    return found


def established(crd: dict[str, Any]) -> bool:
    """Whether the API server serves ``crd`` (its ``Established`` condition is True)."""
    return any(
        c.get("type") == "Established" and c.get("status") == "True"
        for c in (crd.get("status") or {}).get("conditions") or []
    )


async def apply_all(
    cluster: Cluster, crds: list[dict[str, Any]], *, timeout_seconds: float, poll: float = 0.5
) -> list[str]:
    """Apply each CRD, then wait for all to be established; the names applied. Raises
    ``ApiError`` when the API server refuses one, ``TimeoutError`` when one is not
    established within ``timeout_seconds``."""
    applied = []
    for crd in crds:
        name = crd["metadata"]["name"]
        await cluster.apply(f"{CRD_PATH}/{name}", crd, field_manager=FIELD_MANAGER)
        applied.append(name)
    deadline = time.monotonic() + timeout_seconds
    for name in applied:
        while not established(await cluster.get_path(f"{CRD_PATH}/{name}")):
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{name} not Established within {timeout_seconds:.0f} s")
            await asyncio.sleep(poll)
    return applied


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m sparkglass.operator.crd_apply``."""
    parser = argparse.ArgumentParser(
        prog="python -m sparkglass.operator.crd_apply",
        description="Server-side apply sparkglass's CRDs and wait until they are established.",
    )
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="directory of the CRD YAML files (default: the ones packaged with sparkglass)",
    )
    parser.add_argument(
        "--timeout-seconds",
        type=float,
        default=120.0,
        help="how long to wait for the CRDs to be established (default 120)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Apply the CRDs (those ``sparkglass operator crds`` prints, which are the ones the
    operator in the same image expects) and wait until they are established. Exit status 1
    (which fails the hook, so Helm stops the upgrade) when a file is not a
    CustomResourceDefinition of sparkglass.io, the API server refuses one, or one is not
    established in time."""
    args = build_parser().parse_args(argv)
    try:
        crds = load_crds(args.dir or packaged_crd_dir())
    except (OSError, ValueError, yaml.YAMLError) as exc:
        print(f"crd_apply: {exc}", file=sys.stderr)
        return 1

    async def run() -> list[str]:
        cluster = Cluster()
        try:
            return await apply_all(cluster, crds, timeout_seconds=args.timeout_seconds)
        finally:
            cluster.close()

    try:
        applied = asyncio.run(run())
    except (ApiError, TimeoutError) as exc:
        print(f"crd_apply: {exc}", file=sys.stderr)
        return 1
    for name in applied:
        print(f"customresourcedefinition {name} applied (server-side) and established")
    return 0


if __name__ == "__main__":
    sys.exit(main())
