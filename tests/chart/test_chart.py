"""The Helm chart: lint, schema-valid manifests, least-privilege RBAC, hardened Pods, CRDs in
sync with ``crds/``, and commands/settings that exist in the package.

Everything runs offline in a few seconds: Helm's own engine renders (helm-python-sdk), the
Kubernetes OpenAPI schemas validate (kubernetes-validate, strict: unknown fields fail), and
the CRDs' openAPIV3Schema validates custom resources (jsonschema).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from tests.support.chart_rbac import allows, rules_for
from tests.support.cli_parse import parse_cli
from tests.support.crd_schema import yaml_documents

from .conftest import (
    CHART,
    NAMESPACE,
    REPO,
    REQUIRED,
    VARIANTS,
    find,
    load_chart,
    manifests,
    one,
    render,
)

Rendered = Callable[[str], list[dict[str, Any]]]

#: The oldest Kubernetes the chart supports (Chart.yaml kubeVersion) and the newest bundled.
KUBE_VERSIONS = ("1.27", "1.33")
#: Kinds kubernetes-validate has no schema for; checked against SERVICE_MONITOR_SCHEMA below.
CUSTOM_KINDS = {"ServiceMonitor"}

# The subset of prometheus-operator's ServiceMonitor (monitoring.coreos.com/v1) the chart uses;
# kubernetes-validate bundles only built-in kinds and would merely warn about this one.
SERVICE_MONITOR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["selector", "endpoints"],
            "properties": {
                "selector": {
                    "type": "object",
                    "required": ["matchLabels"],
                    "properties": {"matchLabels": {"type": "object", "minProperties": 1}},
                },
                "namespaceSelector": {
                    "type": "object",
                    "properties": {"matchNames": {"type": "array", "items": {"type": "string"}}},
                },
                "endpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["port"],
                        "properties": {
                            "port": {"type": "string"},
                            "path": {"type": "string", "pattern": "^/"},
                            "interval": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"},
                            "scrapeTimeout": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"},
                        },
                    },
                },
            },
        },
    },
}


def _containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return list(doc["spec"]["template"]["spec"]["containers"])


def _env(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


# ---------------------------------------------------------------------------------------------
# Lint and schema validation of the rendered manifests


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_lint_passes(variant: str) -> None:
    helm = pytest.importorskip("helm_python")
    report = helm.lint(str(CHART), VARIANTS[variant], namespace=NAMESPACE, strict=True)
    # Severity 1 is informational ("icon is recommended"); warnings (2) and errors (3) fail.
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert not problems and not report["errors"], report


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_manifests_validate_against_kubernetes_schemas(
    rendered: Rendered, variant: str, kube_version: str
) -> None:
    kv = pytest.importorskip("kubernetes_validate")
    jsonschema = pytest.importorskip("jsonschema")
    docs = rendered(variant)
    assert docs
    for doc in docs:
        label = f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
        if doc["kind"] in CUSTOM_KINDS:
            jsonschema.validate(doc, SERVICE_MONITOR_SCHEMA)
            continue
        try:
            kv.validate(doc, kube_version, strict=True)
        except kv.ValidationError as exc:  # pragma: no cover - the message is the point
            pytest.fail(f"{variant}: {label} is invalid for Kubernetes {kube_version}: {exc}")


EDGE_VALUES: dict[str, dict[str, Any]] = {
    "service off": {"service": {"enabled": False}, "ingress": {"enabled": True}},
    "operator off": {
        "operator": {"enabled": False},
        "metrics": {"serviceMonitor": {"enabled": True}},
    },
    "no rbac, own accounts": {
        "rbac": {"create": False},
        "operator": {"serviceAccount": {"create": False, "name": "ops"}},
        "service": {"serviceAccount": {"create": False}},
        "driver": {"serviceAccount": {"create": False}},
    },
    "existing claim, pinned image": {
        "store": {"sqlite": {"persistence": {"existingClaim": "my-claim"}}},
        "image": {"digest": "sha256:" + "a" * 64},
    },
}


@pytest.mark.parametrize("case", sorted(EDGE_VALUES))
def test_edge_values_render_valid_manifests(case: str) -> None:
    kv = pytest.importorskip("kubernetes_validate")
    docs = manifests(EDGE_VALUES[case])
    for doc in docs:
        if doc["kind"] not in CUSTOM_KINDS:
            kv.validate(doc, KUBE_VERSIONS[0], strict=True)
    kinds = {d["kind"] for d in docs}
    if case == "service off":
        assert not find(docs, "Deployment", "sparkglass-service") and "Ingress" not in kinds
    if case == "operator off":
        assert not find(docs, "Deployment", "sparkglass-operator")
        assert {m["metadata"]["name"] for m in find(docs, "ServiceMonitor")} == {
            "sparkglass-service"
        }
    if case == "no rbac, own accounts":
        assert not kinds & {"Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}
        assert not find(docs, "ServiceAccount")
        pod = one(docs, "Deployment", "sparkglass-operator")["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == "ops"
    if case == "existing claim, pinned image":
        assert not find(docs, "PersistentVolumeClaim")
        dep = one(docs, "Deployment", "sparkglass-service")
        volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
        assert volumes["store"]["persistentVolumeClaim"]["claimName"] == "my-claim"
        assert _containers(dep)[0]["image"].endswith("@sha256:" + "a" * 64)


def test_every_kind_rendered_is_known(rendered: Rendered) -> None:
    """A new custom kind must get a schema here rather than slip past kubernetes-validate."""
    builtin = {
        "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
        "Deployment", "Service", "Secret", "PersistentVolumeClaim", "Ingress",
        "PodDisruptionBudget", "NetworkPolicy", "ValidatingWebhookConfiguration",
    }  # fmt: skip
    kinds = {d["kind"] for v in VARIANTS for d in rendered(v)}
    assert kinds <= builtin | CUSTOM_KINDS, kinds - builtin - CUSTOM_KINDS


def test_names_are_unique_and_dns_safe(rendered: Rendered) -> None:
    for variant in VARIANTS:
        keys = [
            (d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"])
            for d in rendered(variant)
        ]
        assert len(keys) == len(set(keys)), f"{variant}: duplicate objects"
        for _, _, name in keys:
            assert len(name) <= 63 and name == name.lower(), name


def test_long_release_names_stay_within_limits() -> None:
    helm = pytest.importorskip("helm_python")
    name = "a-very-long-release-name-that-is-fifty-three-chars-x"
    assert len(name) <= 53
    chart = load_chart()
    out = chart.render(REQUIRED, name=name, namespace=NAMESPACE)
    for path, text in out.items():
        if path.endswith("NOTES.txt"):
            continue
        for doc in yaml.safe_load_all(text):
            if isinstance(doc, dict) and "metadata" in doc:
                assert len(doc["metadata"]["name"]) <= 63, doc["metadata"]["name"]
    helm.validate_release_name(name)


# ---------------------------------------------------------------------------------------------
# values.schema.json


BAD_VALUES: dict[str, dict[str, Any]] = {
    "six operator replicas": {"operator": {"replicas": 6}},
    "postgresql without a URL": {"store": {"type": "postgresql"}},
    "unknown store": {"store": {"type": "mysql"}},
    "sqlite with two service replicas": {"service": {"replicas": 2}},
    "local auth without tokens": {"service": {"authMode": "local"}},
    "unknown auth mode": {"service": {"authMode": "oidc"}},
    "bad pull policy": {"image": {"pullPolicy": "Sometimes"}},
    "unknown top-level key": {"operatr": {"enabled": False}},
    "unknown nested key": {"service": {"replica": 2}},
    "relative ingress path": {
        "ingress": {"hosts": [{"host": "x", "paths": [{"path": "x", "pathType": "Prefix"}]}]}
    },
    "bad namespace name": {"watchNamespaces": ["Spark_Jobs"]},
    "cluster-wide not a boolean": {"operator": {"clusterWide": "yes"}},
    "database URL in plain config": {"service": {"config": {"database_url": "sqlite:///x"}}},
    "port out of range": {"service": {"port": 70000}},
    "jar that is not a jar URL": {"operator": {"runtimeJar": "/opt/x.txt"}},
    "bad metrics interval": {"metrics": {"serviceMonitor": {"interval": "soon"}}},
}


@pytest.mark.parametrize("case", sorted(BAD_VALUES))
def test_schema_rejects_bad_values(case: str) -> None:
    helm = pytest.importorskip("helm_python")
    chart = load_chart()
    with pytest.raises(helm.HelmValuesError):
        chart.validate_schema(chart.merge_values(BAD_VALUES[case]))
    # `helm install`/`helm template` validate the same way before rendering anything.
    with pytest.raises(helm.HelmError):
        render(BAD_VALUES[case])


def test_lease_timing_out_of_order_fails_the_render_naming_the_rule() -> None:
    """The schema checks each bound; the order of the three is the template's check."""
    helm = pytest.importorskip("helm_python")
    values = {"operator": {"leaderElection": {"renewDeadlineSeconds": 20}}}
    with pytest.raises(helm.HelmError, match="retryPeriodSeconds < renewDeadlineSeconds"):
        render(values)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_schema_accepts_documented_variants(variant: str) -> None:
    chart = load_chart()
    chart.validate_schema(chart.merge_values(VARIANTS[variant]))


def test_defaults_hold_no_secrets() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["store"]["postgresql"]["url"] == ""
    assert values["store"]["existingSecret"] == ""
    assert values["service"]["localAuth"]["existingSecret"] == ""


def test_store_key_comes_from_a_secret_generated_once_or_named() -> None:
    """SPARKGLASS_STORE_KEY (the Fernet key of driver tokens at rest) is never a literal: the
    chart's own Secret (a valid Fernet key, kept on uninstall) or one the user names."""
    from cryptography.fernet import Fernet

    def store_key_env(docs: list[dict[str, Any]]) -> dict[str, Any]:
        container = one(docs, "Deployment", "sparkglass-service")["spec"]["template"]["spec"][
            "containers"
        ][0]
        [env] = [e for e in container["env"] if e["name"] == "SPARKGLASS_STORE_KEY"]
        return dict(env)

    docs = manifests({})
    secret = one(docs, "Secret", "sparkglass-store-key")
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    Fernet(secret["stringData"]["key"])  # a well-formed key
    assert store_key_env(docs) == {
        "name": "SPARKGLASS_STORE_KEY",
        "valueFrom": {"secretKeyRef": {"name": "sparkglass-store-key", "key": "key"}},
    }
    named = manifests(
        {"service": {"storeKey": {"existingSecret": "mine", "existingSecretKey": "k"}}}
    )
    assert not [d for d in named if d["metadata"]["name"] == "sparkglass-store-key"]
    assert store_key_env(named)["valueFrom"] == {"secretKeyRef": {"name": "mine", "key": "k"}}


def test_every_value_is_documented() -> None:
    """Each key in values.yaml has a comment on the line just above it, except keys inside a
    value that is documented as a whole (a ``# --`` comment above resources:, hosts:, ...)."""
    lines = (CHART / "values.yaml").read_text().splitlines()
    undocumented = []
    # (indent, documented-as-a-whole) of the keys enclosing the current line.
    stack: list[tuple[int, bool]] = []
    for i, line in enumerate(lines):
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or ":" not in stripped:
            continue
        indent = len(line) - len(line.lstrip())
        while stack and stack[-1][0] >= indent:
            stack.pop()
        comment = []
        j = i - 1
        while j >= 0 and lines[j].strip().startswith("#"):
            comment.append(lines[j].strip())
            j -= 1
        if not any(whole for _, whole in stack) and not comment:
            undocumented.append(f"{i + 1}: {stripped}")
        stack.append((indent, any(c.startswith("# --") for c in comment)))
    assert not undocumented, undocumented


def test_schema_covers_every_default_key() -> None:
    """values.schema.json forbids unknown keys, so every default key must be declared."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def walk(node: dict[str, Any], sch: dict[str, Any], path: str) -> None:
        props = sch.get("properties")
        if props is None:
            return
        for key, val in node.items():
            assert key in props, f"{path}{key} is missing from values.schema.json"
            if isinstance(val, dict):
                walk(val, props[key], f"{path}{key}.")

    walk(values, schema, "")


# ---------------------------------------------------------------------------------------------
# Pods: non-root, read-only, probes, resources, secrets by reference


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_pods_are_hardened(rendered: Rendered, variant: str) -> None:
    deployments = find(rendered(variant), "Deployment")
    assert {d["metadata"]["name"] for d in deployments} == {
        "sparkglass-operator",
        "sparkglass-service",
    }
    for dep in deployments:
        pod = dep["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] != 0
        assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
        assert pod.get("automountServiceAccountToken", True), "both talk to the API server"
        for c in _containers(dep):
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True
            assert sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"]["drop"] == ["ALL"]
            assert c["livenessProbe"] and c["readinessProbe"] and c["startupProbe"]
            assert c["resources"]["requests"]["memory"] and c["resources"]["limits"]["memory"]
            # A read-only root needs a writable /tmp for Python, uvicorn and kopf.
            assert "/tmp" in {m["mountPath"] for m in c["volumeMounts"]}
            probe_ports = {
                c[p]["httpGet"]["port"] for p in ("livenessProbe", "readinessProbe", "startupProbe")
            }
            assert probe_ports <= {p["name"] for p in c["ports"]}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_store_url_only_from_a_secret(rendered: Rendered, variant: str) -> None:
    docs = rendered(variant)
    service = _containers(one(docs, "Deployment", "sparkglass-service"))[0]
    url = _env(service)["SPARKGLASS_DATABASE_URL"]
    assert "value" not in url, "the store URL must come from a Secret"
    ref = url["valueFrom"]["secretKeyRef"]
    store = VARIANTS[variant].get("store", {})
    if store.get("existingSecret"):
        assert ref == {"name": store["existingSecret"], "key": store["existingSecretKey"]}
        # The chart makes no store URL Secret; only the generated store key (driver tokens)
        # and the admission webhook's certificate.
        assert sorted(d["metadata"]["name"] for d in find(docs, "Secret")) == [
            "sparkglass-operator-webhook-tls",
            "sparkglass-store-key",
        ]
    else:
        secret = one(docs, "Secret", ref["name"])
        assert ref["key"] in secret["stringData"]
    # No Pod spec holds a URL with credentials, whatever the variant.
    for dep in find(docs, "Deployment"):
        assert "not-a-real-password" not in json.dumps(dep)


def test_sqlite_default_lives_on_a_kept_volume(rendered: Rendered) -> None:
    docs = rendered("default")
    secret = one(docs, "Secret", "sparkglass-store")
    assert secret["stringData"]["url"] == "sqlite:////var/lib/sparkglass/sparkglass.db"
    pvc = one(docs, "PersistentVolumeClaim", "sparkglass-store")
    assert pvc["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    dep = one(docs, "Deployment", "sparkglass-service")
    assert dep["spec"]["strategy"]["type"] == "Recreate"
    mounts = {m["name"]: m["mountPath"] for m in _containers(dep)[0]["volumeMounts"]}
    assert mounts["store"] == "/var/lib/sparkglass"
    # Only the service opens the store; the operator hands it results over HTTP.
    operator = _containers(one(docs, "Deployment", "sparkglass-operator"))[0]
    assert "SPARKGLASS_DATABASE_URL" not in _env(operator)


def test_postgresql_variant(rendered: Rendered) -> None:
    docs = rendered("postgresql-ingress-metrics")
    assert not find(docs, "PersistentVolumeClaim")
    service = one(docs, "Deployment", "sparkglass-service")
    assert service["spec"]["replicas"] == 2
    assert "strategy" not in service["spec"]  # rolling updates are fine with PostgreSQL
    operator = _containers(one(docs, "Deployment", "sparkglass-operator"))[0]
    # Only the service opens the store; the operator hands it results over HTTP.
    assert "SPARKGLASS_DATABASE_URL" not in _env(operator)
    ref = _env(service["spec"]["template"]["spec"]["containers"][0])["SPARKGLASS_DATABASE_URL"]
    assert ref["valueFrom"]["secretKeyRef"] == {"name": "sparkglass-pg", "key": "url"}
    ingress = one(docs, "Ingress", "sparkglass-service")
    assert ingress["spec"]["ingressClassName"] == "nginx"
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend == {"name": "sparkglass-service", "port": {"name": "http"}}
    # Links in DataSample status use the public URL.
    assert _env(operator)["SPARKGLASS_SERVICE_URL"]["value"] == "https://sparkglass.example.com"
    pdb = one(docs, "PodDisruptionBudget", "sparkglass-service")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == service["spec"]["selector"]["matchLabels"]


def test_service_monitors_select_metrics_ports(rendered: Rendered) -> None:
    docs = rendered("postgresql-ingress-metrics")
    monitors = find(docs, "ServiceMonitor")
    assert {m["metadata"]["name"] for m in monitors} == {
        "sparkglass-service",
        "sparkglass-operator",
    }
    services = find(docs, "Service")
    for monitor in monitors:
        assert monitor["metadata"]["labels"]["release"] == "prometheus"
        selector = monitor["spec"]["selector"]["matchLabels"]
        matched = [s for s in services if selector.items() <= s["metadata"]["labels"].items()]
        assert len(matched) == 1, monitor["metadata"]["name"]
        port_names = {p["name"] for p in matched[0]["spec"]["ports"]}
        assert {e["port"] for e in monitor["spec"]["endpoints"]} <= port_names
    # Each Service's target port exists on the Pods it selects.
    for svc in services:
        pods = [
            d
            for d in find(docs, "Deployment")
            if svc["spec"]["selector"].items()
            <= d["spec"]["template"]["metadata"]["labels"].items()
        ]
        assert len(pods) == 1, svc["metadata"]["name"]
        names = {p["name"] for c in _containers(pods[0]) for p in c["ports"]}
        assert {p["targetPort"] for p in svc["spec"]["ports"]} <= names


def test_local_auth_mounts_tokens_and_passes_config(rendered: Rendered) -> None:
    docs = rendered("local-auth")
    dep = one(docs, "Deployment", "sparkglass-service")
    env = _env(_containers(dep)[0])
    assert env["SPARKGLASS_AUTH_MODE"]["value"] == "local"
    assert env["SPARKGLASS_TOKENS_FILE"]["value"] == "/etc/sparkglass/tokens/tokens"
    assert env["SPARKGLASS_REFRESH_INTERVAL_SECONDS"]["value"] == "30"
    assert env["SPARKGLASS_RETENTION_SECONDS"]["value"] == "86400"
    volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    assert volumes["tokens"]["secret"]["secretName"] == "sparkglass-tokens"
    # No TokenReview/SubjectAccessReview in local mode: no auth-delegator binding.
    assert not [
        b
        for b in find(docs, "ClusterRoleBinding")
        if b["roleRef"]["name"] == "system:auth-delegator"
    ]
    pdb = one(docs, "PodDisruptionBudget", "sparkglass-service")
    assert pdb["spec"] == {
        "maxUnavailable": "50%",
        "selector": pdb["spec"]["selector"],
    }


# ---------------------------------------------------------------------------------------------
# RBAC


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_no_wildcards_anywhere(rendered: Rendered, variant: str) -> None:
    for role in find(rendered(variant), "ClusterRole") + find(rendered(variant), "Role"):
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule.get(field, []), role["metadata"]["name"]
            # Listing Secrets would reveal every Secret's contents.
            if "secrets" in rule["resources"]:
                assert not {"list", "watch"} & set(rule["verbs"]), role["metadata"]["name"]


def test_operator_rights_match_what_it_calls(rendered: Rendered) -> None:
    """Every object kind the operator's API client touches is granted, and no more."""
    from sparkglass.operator.kube import cluster

    docs = rendered("default")
    rules = rules_for(docs, "sparkglass-operator", NAMESPACE)
    kinds = [v for v in vars(cluster).values() if isinstance(v, cluster.Kind)]
    assert kinds
    for kind in kinds:
        group = "" if kind.prefix == "/api/v1" else kind.prefix.split("/")[2]
        assert allows(rules, group, kind.plural, "get") or kind.plural == "events", kind
    # Child objects and the driver Pod.
    for resource in ("pods", "configmaps", "secrets", "services"):
        assert allows(rules, "", resource, "create"), resource
    assert allows(rules, "", "pods", "watch")  # kopf's driver-Pod event handler
    # The ConfigMaps and Services it creates are watched (by its labels), never Secrets.
    for resource in ("configmaps", "services"):
        for verb in ("list", "watch"):
            assert allows(rules, "", resource, verb), (resource, verb)
    assert not allows(rules, "", "secrets", "list") and not allows(rules, "", "secrets", "watch")
    assert allows(rules, "", "pods", "delete")
    assert allows(rules, "", "events", "create")
    for plural in ("sparkapplications", "datasamples"):
        for verb in ("list", "watch", "patch", "delete"):
            assert allows(rules, "sparkglass.io", plural, verb), (plural, verb)
        assert allows(rules, "sparkglass.io", f"{plural}/status", "patch")
        # Users and the service create these; the operator never does.
        assert not allows(rules, "sparkglass.io", plural, "create")
    # Watching exact namespaces kopf scans nothing: no CRD discovery, no cluster-scoped right.
    assert not allows(rules, "apiextensions.k8s.io", "customresourcedefinitions", "watch")
    wide = rules_for(rendered("cluster-wide"), "sparkglass-operator", "anywhere")
    assert allows(wide, "apiextensions.k8s.io", "customresourcedefinitions", "watch")
    for resource in ("configmaps", "services"):  # cluster-wide watches of its children
        assert allows(wide, "", resource, "list") and allows(wide, "", resource, "watch")
    assert not allows(rules, "", "secrets", "delete")
    # The control certificate is added to (or renewed in) the Secret before a driver starts.
    assert allows(rules, "", "secrets", "patch")


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_two_operator_replicas_roll_and_keep_one_up_with_rights_for_their_lease(
    rendered: Rendered, variant: str
) -> None:
    docs = rendered(variant)
    dep = one(docs, "Deployment", "sparkglass-operator")
    assert dep["spec"]["replicas"] == 2
    assert dep["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    pdb = one(docs, "PodDisruptionBudget", "sparkglass-operator")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
    release_ns = dep["metadata"]["namespace"]
    rules = rules_for(docs, "sparkglass-operator", release_ns)
    for verb in ("get", "create", "patch"):
        assert allows(rules, "coordination.k8s.io", "leases", verb), verb
    # The Lease right is a Role in the release namespace, not cluster-wide.
    for role in find(docs, "ClusterRole"):
        assert not any("leases" in r.get("resources", []) for r in role["rules"])


def test_namespaced_install_binds_only_watched_namespaces(rendered: Rendered) -> None:
    docs = rendered("namespaced")
    bindings = find(docs, "RoleBinding")
    for sa in ("sparkglass-operator", "sparkglass-service"):
        namespaces = {
            b["metadata"]["namespace"]
            for b in bindings
            if any(s["name"] == sa for s in b["subjects"])
            # The operator's Lease Role lives in the release namespace (leader election).
            and b["metadata"]["name"] != "sparkglass-operator-lease"
        }
        assert namespaces == {"spark-jobs", "spark-batch"}, sa
        assert allows(rules_for(docs, sa, "spark-jobs"), "sparkglass.io", "datasamples", "get")
        # Elsewhere: nothing on sparkglass objects or Pods.
        elsewhere = rules_for(docs, sa, "kube-system")
        for resource in ("datasamples", "sparkapplications"):
            assert not allows(elsewhere, "sparkglass.io", resource, "get"), (sa, resource)
        assert not allows(elsewhere, "", "pods", "create"), sa
    # The only cluster-wide binding left: the service's auth-delegator (TokenReview and
    # SubjectAccessReview are cluster-scoped). No ClusterRole: Roles in each namespace.
    crbs = {b["metadata"]["name"]: b["roleRef"]["name"] for b in find(docs, "ClusterRoleBinding")}
    assert crbs == {"sparkglass-service-auth-delegator": "system:auth-delegator"}
    assert not find(docs, "ClusterRole")
    operator = _containers(one(docs, "Deployment", "sparkglass-operator"))[0]
    assert "--namespace=spark-jobs" in operator["args"]
    assert "--namespace=spark-batch" in operator["args"]
    assert "--all-namespaces" not in operator["args"]


def test_default_install_is_namespaced_to_the_release_namespace(rendered: Rendered) -> None:
    """Without watchNamespaces and without operator.clusterWide the chart
    manages its own namespace only, with Roles; nothing of it reaches another namespace."""
    docs = rendered("default")
    operator = _containers(one(docs, "Deployment", "sparkglass-operator"))[0]
    assert f"--namespace={NAMESPACE}" in operator["args"]
    assert "--all-namespaces" not in operator["args"]
    assert {(r["kind"], r["metadata"]["namespace"]) for r in find(docs, "Role")} == {
        ("Role", NAMESPACE)
    }
    assert not find(docs, "ClusterRole")
    crbs = {b["roleRef"]["name"] for b in find(docs, "ClusterRoleBinding")}
    assert crbs == {"system:auth-delegator"}  # the service's TokenReview/SubjectAccessReview
    for sa in ("sparkglass-operator", "sparkglass-service", "spark-driver"):
        here, elsewhere = rules_for(docs, sa, NAMESPACE), rules_for(docs, sa, "spark-jobs")
        assert here, sa
        assert not [r for r in elsewhere if "builtin" not in r], (sa, elsewhere)
    assert allows(rules_for(docs, "sparkglass-operator", NAMESPACE), "", "secrets", "get")
    assert {p["metadata"]["namespace"] for p in find(docs, "NetworkPolicy")} == {NAMESPACE}
    assert "watching sparkglass-system" in render({})["sparkglass/templates/NOTES.txt"]


def test_cluster_wide_only_with_the_explicit_value(rendered: Rendered) -> None:
    docs = rendered("cluster-wide")
    operator = _containers(one(docs, "Deployment", "sparkglass-operator"))[0]
    assert "--all-namespaces" in operator["args"]
    assert not [a for a in operator["args"] if a.startswith("--namespace")]
    for sa in ("sparkglass-operator", "sparkglass-service"):
        bound = {
            b["roleRef"]["name"]
            for b in find(docs, "ClusterRoleBinding")
            if any(s["name"] == sa for s in b["subjects"])
        }
        assert f"{sa}" in bound, (sa, bound)
        rules = rules_for(docs, sa, "any-namespace")
        assert allows(rules, "sparkglass.io", "datasamples", "get"), sa
    # The Lease stays a Role of the release namespace; drivers and policies follow
    # driver.namespaces.
    assert {r["metadata"]["name"] for r in find(docs, "Role", None)} >= {
        "sparkglass-operator-lease"
    }
    assert {
        p["metadata"]["namespace"] for p in find(docs, "NetworkPolicy", "sparkglass-driver")
    } == {
        "spark-jobs",
        "spark-batch",
    }
    assert "all namespaces" in render(VARIANTS["cluster-wide"])["sparkglass/templates/NOTES.txt"]


def test_cluster_wide_refuses_watch_namespaces_and_uncovered_network_policies() -> None:
    """A10: a cluster-wide operator with NetworkPolicies but no driver.namespaces would leave
    every namespace but the release's without them: the render fails saying so."""
    helm = pytest.importorskip("helm_python")
    with pytest.raises(helm.HelmError, match="leave watchNamespaces empty"):
        render({"operator": {"clusterWide": True}, "watchNamespaces": ["spark-jobs"]})
    with pytest.raises(
        helm.HelmError, match=rf"would cover only {NAMESPACE}; list in driver.namespaces"
    ):
        render({"operator": {"clusterWide": True}})
    # Without NetworkPolicies, or with the namespaces named, it renders.
    docs = manifests({"operator": {"clusterWide": True}, "networkPolicy": {"enabled": False}})
    assert not find(docs, "NetworkPolicy")
    assert find(docs, "ClusterRoleBinding", "sparkglass-operator")


def test_service_may_review_tokens_and_create_samples(rendered: Rendered) -> None:
    docs = rendered("default")
    rules = rules_for(docs, "sparkglass-service", NAMESPACE)
    assert {"builtin": "system:auth-delegator"} in rules
    assert allows(rules, "sparkglass.io", "datasamples", "create")
    assert allows(rules, "sparkglass.io", "sparkapplications", "list")
    assert not allows(rules, "sparkglass.io", "sparkapplications", "create")
    assert not any("secrets" in r.get("resources", []) for r in rules)


def test_driver_manages_executors_in_its_namespace_only(rendered: Rendered) -> None:
    for variant, namespaces in (
        ("default", {NAMESPACE}),
        ("namespaced", {"spark-jobs", "spark-batch"}),
    ):
        docs = rendered(variant)
        accounts = [d for d in find(docs, "ServiceAccount", "spark-driver")]
        assert {a["metadata"]["namespace"] for a in accounts} == namespaces
        for ns in namespaces:
            rules = rules_for(docs, "spark-driver", ns)
            for verb in ("create", "watch", "list", "delete", "deletecollection"):
                assert allows(rules, "", "pods", verb), verb
            assert allows(rules, "", "configmaps", "create")  # executor conf map
            assert not allows(rules, "", "secrets", "get")
            assert allows(rules, "", "persistentvolumeclaims", "create") == (
                variant == "namespaced"
            )
        # Roles only: a driver gets nothing outside its namespace.
        subjects = [
            s
            for b in find(docs, "ClusterRoleBinding")
            for s in b["subjects"]
            if s["name"] == "spark-driver"
        ]
        assert not subjects


def _allowed_accounts(docs: list[dict[str, Any]]) -> str:
    operator = _containers(one(docs, "Deployment", "sparkglass-operator"))[0]
    return str(_env(operator)["SPARKGLASS_ALLOWED_SERVICE_ACCOUNTS"]["value"])


def test_operator_accepts_the_driver_account_or_the_listed_ones() -> None:
    """SparkApplications may run as the chart's driver account by default, as the listed
    accounts when given, and never as the chart's own operator or service account."""
    helm = pytest.importorskip("helm_python")
    assert _allowed_accounts(manifests({})) == "spark-driver"
    assert _allowed_accounts(manifests({"driver": {"serviceAccount": {"name": "spark"}}})) == (
        "spark"
    )
    listed = {"operator": {"allowedServiceAccounts": ["spark-driver", "etl-runner"]}}
    assert _allowed_accounts(manifests(listed)) == "spark-driver,etl-runner"
    for own in ("sparkglass-operator", "sparkglass-service"):
        with pytest.raises(helm.HelmError, match=f"allowedServiceAccounts lists {own}"):
            render({"operator": {"allowedServiceAccounts": ["spark-driver", own]}})
    chart = load_chart()
    for bad in (["Spark_Driver"], ["a", "a"]):
        with pytest.raises(helm.HelmValuesError):
            chart.validate_schema(chart.merge_values({"operator": {"allowedServiceAccounts": bad}}))


def test_example_application_runs_as_the_chart_driver_account() -> None:
    example = yaml.safe_load((REPO / "examples" / "flights-sparkapplication.yaml").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert example["spec"]["driver"]["serviceAccount"] == values["driver"]["serviceAccount"]["name"]


# ---------------------------------------------------------------------------------------------
# CRDs: identical to crds/, valid CustomResourceDefinitions


def test_chart_crds_identical_to_top_level() -> None:
    top = REPO / "crds"
    assert top.is_dir(), "crds/ is where the CRDs live; `make crds` copies it into the chart"
    ours = {p.name: p.read_bytes() for p in sorted((CHART / "crds").glob("*.yaml"))}
    theirs = {p.name: p.read_bytes() for p in sorted(top.glob("*.yaml"))}
    assert sorted(ours) == sorted(theirs), (
        "charts/sparkglass/crds/ does not hold the same files as crds/: run `make crds`"
    )
    for name in theirs:
        assert ours[name] == theirs[name], (
            f"charts/sparkglass/crds/{name} differs from crds/{name}: run `make crds`"
        )


def test_chart_loads_its_crds() -> None:
    chart = load_chart()
    names = set()
    for crd in chart.crds:
        for doc in yaml.safe_load_all(crd["data"]):
            if doc:
                assert doc["kind"] == "CustomResourceDefinition"
                names.add(doc["metadata"]["name"])
    assert {"sparkapplications.sparkglass.io", "datasamples.sparkglass.io"} <= names


def test_crds_validate_as_kubernetes_objects() -> None:
    kv = pytest.importorskip("kubernetes_validate")
    for path in sorted((CHART / "crds").glob("*.yaml")):
        for doc in yaml_documents(path):
            if doc:
                kv.validate(doc, KUBE_VERSIONS[0], strict=True)


# ---------------------------------------------------------------------------------------------
# NOTES.txt


def _crd_schema(plural: str) -> dict[str, Any]:
    for path in (CHART / "crds").glob("*.yaml"):
        for doc in yaml_documents(path):
            if doc and doc["spec"]["names"]["plural"] == plural:
                return dict(doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    raise AssertionError(f"no CRD for {plural}")


def test_notes_explain_page_and_first_sample() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    notes = render({})["sparkglass/templates/NOTES.txt"]
    assert f"kubectl -n {NAMESPACE} port-forward svc/sparkglass-service 8080:80" in notes
    assert "http://127.0.0.1:8080/ui/" in notes
    assert "spec.driver.serviceAccount: spark-driver" in notes
    assert "/applications/APP/vertices/VERTEX/data-sample" in notes
    assert "Authorization: Bearer $TOKEN" in notes
    # The DataSample in the notes is a valid one once APP and VERTEX are filled in.
    block = notes.split("apply -f -\n", 1)[1].split("   YAML", 1)[0]
    sample = yaml.safe_load(
        "\n".join(line[3:] for line in block.splitlines())
        .replace("APP", "flights")
        .replace("VERTEX", "parse")
    )
    assert sample["kind"] == "DataSample"
    jsonschema.validate(sample, _crd_schema("datasamples"))


def test_notes_with_ingress_use_the_public_url() -> None:
    notes = render(VARIANTS["postgresql-ingress-metrics"])["sparkglass/templates/NOTES.txt"]
    assert "https://sparkglass.example.com/ui/" in notes
    assert "port-forward" not in notes


# ---------------------------------------------------------------------------------------------
# The commands and settings the chart uses exist in the package


def test_console_script_is_declared() -> None:
    from importlib.metadata import entry_points

    scripts = {e.name: e.value for e in entry_points(group="console_scripts")}
    assert scripts.get("sparkglass") == "sparkglass.cli:main"


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_operator_command_parses(rendered: Rendered, variant: str) -> None:
    container = _containers(one(rendered(variant), "Deployment", "sparkglass-operator"))[0]
    assert container["command"] == ["sparkglass"]
    ctx = parse_cli(container["args"])
    params = ctx.params
    # Leader election, not standalone: the Lease in the release namespace (POD_NAMESPACE).
    assert params["standalone"] is False
    assert params["lease_name"] == "sparkglass-operator"
    assert (params["lease_duration"], params["renew_deadline"], params["retry_period"]) == (
        15,
        10,
        2,
    )
    env = _env(container)
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert params["health_port"] == 8080 and params["metrics_port"] == 9090
    assert params["runtime_jar"] == "local:///opt/sparkglass/sparkglass-tap.jar"
    # Every SPARKGLASS_* variable the chart sets is one the command reads (the command is the
    # one place the operator reads its settings), and the command accepts its value.
    envvars = {p.envvar for p in ctx.command.params if p.envvar}
    plain = {n: e["value"] for n, e in _env(container).items() if "value" in e}
    for name in _env(container):
        if name.startswith("SPARKGLASS_"):
            assert name in envvars, f"`sparkglass operator run` does not read {name}"
    with pytest.MonkeyPatch.context() as env:
        for name, value in plain.items():
            env.setenv(name, value)
        from_env = parse_cli(container["args"]).params
    accounts = plain["SPARKGLASS_ALLOWED_SERVICE_ACCOUNTS"].split(",")
    assert from_env["allowed_service_accounts"] == accounts


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_service_command_and_settings_exist(rendered: Rendered, variant: str) -> None:
    container = _containers(one(rendered(variant), "Deployment", "sparkglass-service"))[0]
    assert container["command"] == ["sparkglass"]
    parse_cli(container["args"])
    from sparkglass.service.settings import Settings

    fields = {f"SPARKGLASS_{name.upper()}" for name in Settings.model_fields}
    values: dict[str, str] = {}
    for name, entry in _env(container).items():
        if name.startswith("SPARKGLASS_"):
            assert name in fields, f"the service has no setting for {name}"
            if "value" in entry:
                values[name.removeprefix("SPARKGLASS_").lower()] = entry["value"]
    # Every value parses as its setting (enums, ports, durations), and together they are a
    # valid combination (auth_mode=local refuses execution_mode=kubernetes).
    Settings.model_validate(values)
    # The port uvicorn binds is the one the probes and Service target.
    port = int(_env(container)["SPARKGLASS_PORT"]["value"])
    assert {"name": "http", "containerPort": port, "protocol": "TCP"} in container["ports"]


def test_service_health_path_exists() -> None:
    from sparkglass.service.routers import operations

    paths = {getattr(r, "path", None) for r in operations.router.routes}
    assert "/healthz" in paths and "/metrics" in paths


def test_chart_version_matches_package() -> None:
    import tomllib

    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert chart["appVersion"] == project["version"]


def test_readme_documents_the_three_value_sets() -> None:
    readme = (CHART / "README.md").read_text()
    assert readme.count("helm install") >= 3
    for needle in (
        "store.existingSecret",
        "ingress.enabled",
        "serviceMonitor.enabled",
        "KUBECONFIG",
    ):
        assert needle in readme, needle
