"""RBAC of rendered manifests: which rules apply to a ServiceAccount, and whether they allow
a verb on a resource."""

from __future__ import annotations

from typing import Any


def rules_for(docs: list[dict[str, Any]], sa: str, namespace: str) -> list[dict[str, Any]]:
    """Every rule that applies to ServiceAccount ``sa`` in ``namespace`` (via any binding)."""
    roles = {
        (d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]): d
        for d in docs
        if d["kind"] in ("Role", "ClusterRole")
    }
    rules: list[dict[str, Any]] = []
    for b in docs:
        if b["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not any(s["kind"] == "ServiceAccount" and s["name"] == sa for s in b["subjects"]):
            continue
        if b["kind"] == "RoleBinding" and b["metadata"]["namespace"] != namespace:
            continue
        ref = b["roleRef"]
        ns = b["metadata"].get("namespace") if ref["kind"] == "Role" else None
        role = roles.get((ref["kind"], ns, ref["name"]))
        if role is None:
            rules.append({"builtin": ref["name"]})
        else:
            rules.extend(role["rules"])
    return rules


def allows(rules: list[dict[str, Any]], group: str, resource: str, verb: str) -> bool:
    return any(
        group in r.get("apiGroups", [])
        and resource in r.get("resources", [])
        and verb in r.get("verbs", [])
        for r in rules
    )
