"""The optional CRD upgrade hook: a pre-install/pre-upgrade Job that
server-side applies the CRDs of the operator's image (``operator/crd_apply.py``).

Rendered with Helm's own engine and validated against the Kubernetes schemas; the Job's
command is parsed by the module's own parser, its RBAC compared with the CRDs the module
would apply. ``tests/operator/test_crd_apply.py`` runs the module against an API server.
"""

from __future__ import annotations

import shlex
from typing import Any

import pytest

from .conftest import NAMESPACE, find, manifests, one, render

ENABLED = {"crds": {"upgradeHook": {"enabled": True}}}
HOOK = "sparkglass-crd-upgrade"
KUBE_VERSIONS = ("1.27", "1.33")


def hook_objects(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if "helm.sh/hook" in (d["metadata"].get("annotations") or {})]


def test_off_by_default() -> None:
    docs = manifests({})
    assert hook_objects(docs) == [] and not find(docs, "Job")


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
def test_renders_valid_objects(kube_version: str) -> None:
    kv = pytest.importorskip("kubernetes_validate")
    hooks = hook_objects(manifests(ENABLED))
    assert sorted((d["kind"], d["metadata"]["name"]) for d in hooks) == [
        ("ClusterRole", HOOK),
        ("ClusterRoleBinding", HOOK),
        ("Job", HOOK),
        ("ServiceAccount", HOOK),
    ]
    for doc in hooks:
        kv.validate(doc, kube_version, strict=True)


def test_runs_before_install_and_upgrade_with_its_rights_created_first() -> None:
    hooks = {d["kind"]: d for d in hook_objects(manifests(ENABLED))}
    for kind, doc in hooks.items():
        annotations = doc["metadata"]["annotations"]
        assert annotations["helm.sh/hook"] == "pre-install,pre-upgrade", kind
        # Recreated on each run, gone once it succeeded. The rights go after a failed run
        # too (hook-failed): a failed upgrade left a cluster-wide ClusterRole able to patch
        # the CRDs. The failed Job, which holds no rights, stays to be read.
        policy = annotations["helm.sh/hook-delete-policy"].split(",")
        if kind == "Job":
            assert policy == ["before-hook-creation", "hook-succeeded"]
        else:
            assert policy == ["before-hook-creation", "hook-succeeded", "hook-failed"], kind
    weights = {
        k: int(d["metadata"]["annotations"]["helm.sh/hook-weight"]) for k, d in hooks.items()
    }
    assert (
        max(weights[k] for k in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding"))
        < (weights["Job"])
    )


def test_the_job_runs_the_module_hardened_with_its_own_account() -> None:
    from sparkglass.operator import crd_apply

    docs = manifests(ENABLED)
    job = one(docs, "Job", HOOK)
    pod = job["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == HOOK and pod["restartPolicy"] == "Never"
    (container,) = pod["containers"]
    assert container["command"] == ["python", "-m", "sparkglass.operator.crd_apply"]
    args = crd_apply.build_parser().parse_args(container["args"])  # the module's own parser
    assert args.timeout_seconds == 120 and args.dir is None  # the image's packaged CRDs
    assert args.timeout_seconds < job["spec"]["activeDeadlineSeconds"]
    assert (
        container["image"]
        == one(docs, "Deployment", "sparkglass-operator")["spec"]["template"]["spec"]["containers"][
            0
        ]["image"]
    ), "the CRDs of the operator's own image"
    assert pod["securityContext"]["runAsNonRoot"] is True
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert container["resources"]["limits"]["memory"]
    assert {m["mountPath"] for m in container["volumeMounts"]} == {"/tmp"}


def test_its_rights_are_the_crds_it_applies_and_no_more() -> None:
    from sparkglass.operator.crd_apply import load_crds, packaged_crd_dir

    applied = sorted(c["metadata"]["name"] for c in load_crds(packaged_crd_dir()))
    docs = manifests(ENABLED)
    role = one(docs, "ClusterRole", HOOK)
    by_verb: dict[str, list[str] | None] = {}
    for rule in role["rules"]:
        assert rule["apiGroups"] == ["apiextensions.k8s.io"]
        assert rule["resources"] == ["customresourcedefinitions"]
        for verb in rule["verbs"]:
            by_verb[verb] = sorted(rule["resourceNames"]) if "resourceNames" in rule else None
    # get/patch (server-side apply, the wait) on exactly those CRDs; create cannot be narrowed
    # by name in RBAC and is needed only for a missing CRD.
    assert by_verb == {"get": applied, "patch": applied, "create": None}
    binding = one(docs, "ClusterRoleBinding", HOOK)
    assert binding["roleRef"]["name"] == HOOK
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": HOOK, "namespace": NAMESPACE}]


def test_bad_timing_fails_the_render_and_the_schema_checks_the_values() -> None:
    helm = pytest.importorskip("helm_python")
    with pytest.raises(helm.HelmError, match="establishTimeoutSeconds must be less than"):
        render(
            {
                "crds": {
                    "upgradeHook": {
                        "enabled": True,
                        "establishTimeoutSeconds": 300,
                        "activeDeadlineSeconds": 300,
                    }
                }
            }
        )
    with pytest.raises(helm.HelmError):
        render({"crds": {"upgradeHook": {"enabled": "yes"}}})
    with pytest.raises(helm.HelmError):
        render({"crds": {"upgradeHook": {"enabled": True, "backoffLimit": 99}}})


def test_documented_in_gitops() -> None:
    from .conftest import REPO

    text = (REPO / "docs" / "gitops.md").read_text()
    assert "crds.upgradeHook.enabled" in text
    assert shlex.join(["python", "-m", "sparkglass.operator.crd_apply"]) in text
