"""NetworkPolicies evaluated the way the NetworkPolicy API defines them: a Pod selected by
some policy accepts a connection only when a rule of one of them admits its source and port;
named ports resolve against the destination Pod's container ports. No cluster enforces
policies in the tests, so this model stands in for one."""

from __future__ import annotations

from typing import Any

Labels = dict[str, str]


def selects(selector: dict[str, Any] | None, labels: Labels) -> bool:
    """A LabelSelector (matchLabels and matchExpressions) against ``labels``; {} selects all."""
    selector = selector or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]
        if not ok:
            return False
    return True


def _peer_admits(
    peer: dict[str, Any], policy_ns: str, src_labels: Labels, src_ns: str, src_ns_labels: Labels
) -> bool:
    if "ipBlock" in peer:
        return False  # sources here are Pods, addressed by selectors only
    if "namespaceSelector" in peer:
        in_ns = selects(peer["namespaceSelector"], src_ns_labels)
    else:
        in_ns = src_ns == policy_ns  # a bare podSelector means the policy's own namespace
    return in_ns and selects(peer.get("podSelector"), src_labels)


def _port_admits(rule_ports: list[dict[str, Any]] | None, port: int, pod: dict[str, Any]) -> bool:
    if not rule_ports:
        return True  # a rule without ports admits every port
    named = {p["name"]: p["containerPort"] for c in pod["spec"]["containers"] for p in c["ports"]}
    for p in rule_ports:
        assert p.get("protocol", "TCP") == "TCP"
        want = p.get("port")
        if want is None or (named.get(want) if isinstance(want, str) else want) == port:
            return True
    return False


def reachable(
    policies: list[dict[str, Any]],
    pod: dict[str, Any],
    port: int,
    src_labels: Labels,
    src_ns: str,
) -> bool:
    """Whether a Pod labelled ``src_labels`` in ``src_ns`` may connect to ``pod`` on ``port``."""
    dst_ns, dst_labels = pod["metadata"]["namespace"], pod["metadata"]["labels"]
    src_ns_labels = {"kubernetes.io/metadata.name": src_ns}
    applying = [
        p
        for p in policies
        if p["metadata"]["namespace"] == dst_ns
        and selects(p["spec"]["podSelector"], dst_labels)
        and "Ingress" in p["spec"].get("policyTypes", ["Ingress"])
    ]
    if not applying:
        return True  # not isolated
    for policy in applying:
        for rule in policy["spec"].get("ingress") or []:
            peers = rule.get("from")
            source_ok = not peers or any(
                _peer_admits(peer, dst_ns, src_labels, src_ns, src_ns_labels) for peer in peers
            )
            if source_ok and _port_admits(rule.get("ports"), port, pod):
                return True
    return False
