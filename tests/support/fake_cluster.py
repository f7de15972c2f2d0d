"""An in-memory stand-in for the parts of the operator's ``Cluster`` client that the code
finding a foreign operator's driver calls (Kubeflow's and the Apache Spark operator's unit
tests)."""

from __future__ import annotations

import base64
import copy
from typing import Any

from sparkglass.operator.kube.cluster import ApiError, Conflict, Kind, NotFound

#: The namespace of objects put without one.
NS = "spark-jobs"


class FakeCluster:
    """The parts of ``cluster.Cluster`` the Kubeflow code calls, in memory. Like plain kmock
    (and unlike the API server) it ignores label selectors: ``list_objects`` answers every
    Pod of the namespace, so the callers' own filtering is what is tested."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.fail: dict[str, ApiError] = {}  # path or plural -> error to raise
        self.conflict_once = False
        self.calls: list[tuple[str, str]] = []

    def put(self, kind: Kind, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        self.objects[(kind.plural, meta.get("namespace", NS), meta["name"])] = copy.deepcopy(obj)

    async def get(self, kind: Kind, namespace: str, name: str) -> dict[str, Any]:
        self.calls.append(("get", kind.plural))
        if kind.plural in self.fail:
            raise self.fail[kind.plural]
        try:
            return copy.deepcopy(self.objects[(kind.plural, namespace, name)])
        except KeyError:
            raise NotFound(404, "not found") from None

    async def find(self, kind: Kind, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return await self.get(kind, namespace, name)
        except NotFound:
            return None

    async def list_objects(
        self, kind: Kind, namespace: str, labels: dict[str, str] | None = None
    ) -> list[dict[str, Any]]:
        self.calls.append(("list", kind.plural))
        return [
            copy.deepcopy(o)
            for (p, ns, _), o in self.objects.items()
            if (p, ns) == (kind.plural, namespace)
        ]

    async def create(self, kind: Kind, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("create", kind.plural))
        if self.conflict_once:
            # Another pass created it a moment before this one.
            self.conflict_once = False
            other = copy.deepcopy(body)
            other["data"]["token"] = base64.b64encode(b"the-other-pass").decode()
            self.put(kind, other)
            raise Conflict(409, "exists")
        if (kind.plural, namespace, body["metadata"]["name"]) in self.objects:
            raise Conflict(409, "exists")
        self.put(kind, body)
        return copy.deepcopy(body)

    async def patch(
        self, kind: Kind, namespace: str, name: str, patch: dict[str, Any]
    ) -> dict[str, Any]:
        self.calls.append(("patch", kind.plural))
        obj = self.objects[(kind.plural, namespace, name)]
        for key, value in patch.items():
            obj[key] = {**(obj.get(key) or {}), **value}
        return copy.deepcopy(obj)

    async def get_path(self, path: str) -> dict[str, Any]:
        self.calls.append(("get_path", path))
        if path in self.fail:
            raise self.fail[path]
        return {"items": []}


