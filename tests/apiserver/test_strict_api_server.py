"""The test API server refuses what a real kube-apiserver refuses.

Every operator, service and chart test talks to :class:`StrictApiServer`; a rule it did not
enforce would let a feature pass here that fails on the first real cluster. Each test below
sends what a real server refuses and checks the answer: the code, the reason and the words
(Kubernetes 1.32+ wording, sources in tests/support/structural.py). The CRDs are the
generated ones of crds/, applied with the real kubectl where that is what users do.
"""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.support.kube_apiserver import StrictApiServer
from tests.support.kube_fixtures import CRD_DIR, NAMESPACE, Kubectl
from tests.support.structural import crd_errors

SAMPLES = f"/apis/sparkglass.io/v1alpha1/namespaces/{NAMESPACE}/datasamples"
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
MERGE = {"Content-Type": "application/merge-patch+json"}


def sample(name: str = "s1", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "sparkglass.io/v1alpha1",
        "kind": "DataSample",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"applicationRef": {"name": "flights"}, "vertex": "parse", **spec},
    }


@pytest.fixture()
async def api(kube: StrictApiServer) -> Any:
    kube.declare_crds(sorted(CRD_DIR.glob("*.yaml")))
    async with httpx.AsyncClient(base_url=str(kube.url).rstrip("/"), timeout=30) as client:
        yield client


async def test_unknown_fields_are_pruned_and_defaults_applied(api: httpx.AsyncClient) -> None:
    body = sample(unknown="x")
    body["spec"]["applicationRef"]["namespace"] = "elsewhere"  # not in the schema
    created = (await api.post(SAMPLES, json=body)).raise_for_status().json()
    assert "unknown" not in created["spec"]
    assert created["spec"]["applicationRef"] == {
        "name": "flights",
        "apiVersion": "sparkglass.io/v1alpha1",
        "kind": "SparkApplication",
    }
    assert created["spec"]["maxRecords"] == 100 and created["spec"]["kind"] == "output"
    assert created["metadata"]["generation"] == 1 and created["metadata"]["uid"]


async def test_an_over_long_filter_is_refused(api: httpx.AsyncClient) -> None:
    answer = await api.post(SAMPLES, json=sample(filter="x" * 4097))
    assert answer.status_code == 422, answer.text
    body = answer.json()
    assert body["reason"] == "Invalid"
    # A schema error of this kind leaves the CEL rules unchecked, and the server says so.
    assert body["details"]["causes"] == [
        {
            "reason": "FieldValueTooLong",
            "message": "Too long: may not be more than 4096 bytes",
            "field": "spec.filter",
        },
        {
            "reason": "FieldValueInvalid",
            "message": 'Invalid value: "null": some validation rules were not checked because '
            "the object was invalid; correct the existing errors to complete validation",
            "field": "<nil>",
        },
    ]
    assert body["message"].startswith(
        'DataSample.sparkglass.io "s1" is invalid: [spec.filter: Too long'
    )


@pytest.mark.parametrize(
    ("spec", "field", "words"),
    [
        ({"maxRecords": 5001}, "spec.maxRecords", "should be less than or equal to 5000"),
        ({"kind": "everything"}, "spec.kind", 'Unsupported value: "everything"'),
        ({"samplingWindow": "31s"}, "spec.samplingWindow", "samplingWindow must be between"),
        ({"samplingWindow": "3 s"}, "spec.samplingWindow", "should match"),
        ({"expectation": "late"}, "spec", "spec.expectation needs spec.kind violations"),
        ({"vertex": "Parse"}, "spec.vertex", "should match"),
    ],
)
async def test_schema_and_rules_refuse_bad_specs(
    api: httpx.AsyncClient, spec: dict[str, Any], field: str, words: str
) -> None:
    answer = await api.post(SAMPLES, json=sample(**spec))
    assert answer.status_code == 422, answer.text
    causes = answer.json()["details"]["causes"]
    assert any(c["field"] == field and words in c["message"] for c in causes), causes


async def test_a_transition_rule_refuses_a_spec_change(api: httpx.AsyncClient) -> None:
    (await api.post(SAMPLES, json=sample())).raise_for_status()
    answer = await api.patch(f"{SAMPLES}/s1", json={"spec": {"vertex": "enrich"}}, headers=MERGE)
    assert answer.status_code == 422, answer.text
    assert "a DataSample spec is immutable" in answer.text


async def test_a_300_kib_annotation_is_refused(api: httpx.AsyncClient) -> None:
    body = sample()
    body["metadata"]["annotations"] = {"example.com/big": "x" * (300 * 1024)}
    answer = await api.post(SAMPLES, json=body)
    assert answer.status_code == 422, answer.text
    assert answer.json()["details"]["causes"][0] == {
        "reason": "FieldValueTooLong",
        "message": "Too long: may not be more than 262144 bytes",
        "field": "metadata.annotations",
    }
    # ...and so is a patch that takes an object past the limit.
    (await api.post(SAMPLES, json=sample("s2"))).raise_for_status()
    patch = {"metadata": {"annotations": {"example.com/big": "x" * (300 * 1024)}}}
    answer = await api.patch(f"{SAMPLES}/s2", json=patch, headers=MERGE)
    assert answer.status_code == 422, answer.text


async def test_a_stale_update_gets_a_conflict(api: httpx.AsyncClient) -> None:
    created = (await api.post(SAMPLES, json=sample())).raise_for_status().json()
    stale = created["metadata"]["resourceVersion"]
    patch = {"metadata": {"labels": {"a": "1"}, "resourceVersion": stale}}
    (await api.patch(f"{SAMPLES}/s1", json=patch, headers=MERGE)).raise_for_status()
    patch = {"metadata": {"labels": {"a": "2"}, "resourceVersion": stale}}
    answer = await api.patch(f"{SAMPLES}/s1", json=patch, headers=MERGE)
    assert answer.status_code == 409, answer.text
    assert answer.json()["reason"] == "Conflict"
    assert answer.json()["message"] == (
        'Operation cannot be fulfilled on datasamples.sparkglass.io "s1": the object has been '
        "modified; please apply your changes to the latest version and try again"
    )


async def test_status_and_spec_are_written_through_their_own_paths(api: httpx.AsyncClient) -> None:
    created = (await api.post(SAMPLES, json={**sample(), "status": {"phase": "Complete"}})).json()
    assert "status" not in created  # a create drops the status of a resource with /status
    both = {"spec": {"maxRecords": 7}, "status": {"phase": "InProgress"}}
    after = (await api.patch(f"{SAMPLES}/s1/status", json=both, headers=MERGE)).json()
    assert after["status"] == {"phase": "InProgress"} and after["spec"]["maxRecords"] == 100
    assert after["metadata"]["generation"] == 1  # a status write is no new generation
    bad = await api.patch(f"{SAMPLES}/s1/status", json={"status": {"phase": "Done"}}, headers=MERGE)
    assert bad.status_code == 422 and "status.phase" in bad.text


async def test_an_object_past_etcds_limit_is_not_stored(api: httpx.AsyncClient) -> None:
    (await api.post(SAMPLES, json=sample())).raise_for_status()
    records = [{"data": "x" * 1000} for _ in range(1700)]  # 1.7 MB: under 3 MiB, over 1.5 MiB
    status = {"status": {"samples": [{"subtaskIndex": 0, "records": records}]}}
    answer = await api.patch(f"{SAMPLES}/s1/status", json=status, headers=MERGE)
    assert answer.status_code == 500, answer.text
    assert answer.json()["message"] == "etcdserver: request is too large"


async def test_a_body_past_3_mib_is_refused_unread(api: httpx.AsyncClient) -> None:
    body = sample()
    body["metadata"]["annotations"] = {"x": "y" * (3 * 1024 * 1024)}
    answer = await api.post(SAMPLES, json=body)
    assert answer.status_code == 413
    assert answer.json()["message"] == "Request entity too large: limit is 3145728"


async def test_a_dry_run_create_is_checked_as_a_create_and_stores_nothing(
    api: httpx.AsyncClient, kube: StrictApiServer
) -> None:
    """``dryRun=All``: the answer is the object as a create would store it, or the create's
    refusal; nothing is stored, no watcher hears of it, no resourceVersion is used."""
    events: list[dict[str, Any]] = []

    async def watch() -> None:
        async with api.stream("GET", SAMPLES, params={"watch": "true"}) as stream:
            async for line in stream.aiter_lines():
                if line.strip():
                    events.append(json.loads(line))

    watching = asyncio.create_task(watch())
    try:
        first = (await api.post(SAMPLES, json=sample("first"))).raise_for_status().json()
        tried = await api.post(SAMPLES, params={"dryRun": "All"}, json=sample("tried", unknown=1))
        assert tried.status_code == 201, tried.text
        would_be = tried.json()
        # Pruned and defaulted, with a uid of the server's, but never stored: no version.
        assert "unknown" not in would_be["spec"] and would_be["spec"]["maxRecords"] == 100
        assert would_be["metadata"]["uid"] and "resourceVersion" not in would_be["metadata"]
        assert kube.stored("sparkglass.io/v1alpha1/datasamples", NAMESPACE, "tried") is None
        # Refused exactly as the create would be.
        bad = await api.post(
            SAMPLES, params={"dryRun": "All"}, json=sample("bad", filter="x" * 4097)
        )
        assert bad.status_code == 422, bad.text
        assert bad.json()["details"]["causes"][0]["field"] == "spec.filter"
        taken = await api.post(SAMPLES, params={"dryRun": "All"}, json=sample("first"))
        assert (taken.status_code, taken.json()["reason"]) == (409, "AlreadyExists"), taken.text
        # Another dryRun value is refused before anything else (the API server's options).
        odd = await api.post(SAMPLES, params={"dryRun": "Some"}, json=sample("odd"))
        assert odd.status_code == 422, odd.text
        assert odd.json()["details"]["causes"] == [
            {
                "reason": "FieldValueNotSupported",
                "message": 'Unsupported value: []string{"Some"}: supported values: "All"',
                "field": "dryRun",
            }
        ]
        assert kube.names("sparkglass.io/v1alpha1/datasamples", NAMESPACE) == {"first"}
        # The next create takes the very next resourceVersion, and is the next event.
        real = (await api.post(SAMPLES, json=sample("real"))).raise_for_status().json()
        rv = real["metadata"]["resourceVersion"]
        assert int(rv) == int(first["metadata"]["resourceVersion"]) + 1
        for _ in range(200):
            if any(e["object"]["metadata"]["name"] == "real" for e in events):
                break
            await asyncio.sleep(0.01)
        assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
            ("ADDED", "first"),
            ("ADDED", "real"),
        ]
    finally:
        watching.cancel()
        await asyncio.gather(watching, return_exceptions=True)


async def test_a_registered_webhook_reviews_creates_and_dry_runs_alike(
    api: httpx.AsyncClient, kube: StrictApiServer
) -> None:
    """A validating webhook sees the object after defaulting (the API server calls it last)
    and its denial is the API server's 403 with its words."""
    asked: list[dict[str, Any]] = []

    async def review(request: dict[str, Any]) -> dict[str, Any]:
        asked.append(request)
        if "carier" in request["object"]["spec"].get("filter", ""):
            status = {"code": 403, "reason": "Forbidden", "message": "spec.filter: no 'carier'"}
            return {"uid": request["uid"], "allowed": False, "status": status}
        return {"uid": request["uid"], "allowed": True}

    kube.register_webhook("sparkglass.io/v1alpha1/datasamples", "datasamples.sparkglass.io", review)
    for params in ({"dryRun": "All"}, {}):
        denied = await api.post(SAMPLES, params=params, json=sample(filter="carier = 'UA'"))
        assert denied.status_code == 403, denied.text
        assert (denied.json()["reason"], denied.json()["message"]) == (
            "Forbidden",
            'admission webhook "datasamples.sparkglass.io" denied the request: '
            "spec.filter: no 'carier'",
        )
    assert [r["dryRun"] for r in asked] == [True, False]
    assert asked[0]["object"]["spec"]["maxRecords"] == 100  # defaulted before the review
    assert asked[0]["operation"] == "CREATE" and asked[0]["kind"]["kind"] == "DataSample"
    assert (await api.post(SAMPLES, json=sample(filter="carrier = 'UA'"))).status_code == 201
    # A schema refusal comes first: the webhook is not asked.
    await api.post(SAMPLES, params={"dryRun": "All"}, json=sample("long", filter="x" * 4097))
    assert len(asked) == 3


def _pod(**security: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "c",
                    "image": "busybox",
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                        **security,
                    },
                }
            ],
        },
    }


async def test_a_privileged_pod_is_refused_in_a_restricted_namespace(
    api: httpx.AsyncClient, kube: StrictApiServer
) -> None:
    answer = await api.post(PODS, json=_pod(privileged=True))
    assert answer.status_code == 403, answer.text
    assert answer.json()["reason"] == "Forbidden"
    assert answer.json()["message"].startswith(
        'pods "p" is forbidden: violates PodSecurity "restricted:latest": '
    )
    assert "privileged" in answer.json()["message"]
    (await api.post(PODS, json=_pod())).raise_for_status()  # the restricted Pod is admitted
    kube.namespaces["open"] = {}
    bare = {"metadata": {"name": "q"}, "spec": {"containers": [{"name": "c", "image": "b"}]}}
    (await api.post("/api/v1/namespaces/open/pods", json=bare)).raise_for_status()


async def test_a_rule_past_the_runtime_cost_limit_is_refused(
    api: httpx.AsyncClient, kube: StrictApiServer
) -> None:
    """Its estimate (7,006,003) is under the CRD limit, so the CRD is accepted; on 1,000
    items one evaluation costs more than the 1,000,000 a call may, as on a real server."""
    crd = _crd_with_rule("self.all(x, self.all(y, x == y || x != y))", max_items=1000)
    kube.register_crd(crd)
    path = f"/apis/example.com/v1/namespaces/{NAMESPACE}/widgets"
    small = {"metadata": {"name": "w1"}, "spec": {"ids": list(range(10))}}
    (await api.post(path, json=small)).raise_for_status()
    big = {"metadata": {"name": "w2"}, "spec": {"ids": list(range(1000))}}
    answer = await api.post(path, json=big)
    assert answer.status_code == 422, answer.text
    assert "call cost exceeds limit" in answer.text


def _crd_with_rule(rule: str, *, max_items: int | None) -> dict[str, Any]:
    ids: dict[str, Any] = {"type": "array", "items": {"type": "integer"}}
    if max_items is not None:
        ids["maxItems"] = max_items
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {"ids": ids},
                                    "x-kubernetes-validations": [
                                        {"rule": rule.replace("self.", "self.ids."), "message": "m"}
                                    ],
                                }
                            },
                        }
                    },
                }
            ],
        },
    }


async def test_kubectl_apply_of_a_too_costly_crd_is_refused(
    kubectl: Kubectl, tmp_path: Path
) -> None:
    """The check that settles CEL cost on a real cluster, made here by the stand-in: the
    same rule without maxItems costs more than 100 times the limit."""
    crd = _crd_with_rule("self.all(x, self.all(y, x == y || x != y))", max_items=None)
    path = tmp_path / "widgets.yaml"
    path.write_text(yaml.safe_dump(crd))
    with pytest.raises(AssertionError, match="exceeds budget by factor of more than 100x"):
        await kubectl.apply(path)
    bounded = copy.deepcopy(crd)
    bounded["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][
        "ids"
    ]["maxItems"] = 100
    path.write_text(yaml.safe_dump(bounded))
    await kubectl.apply(path)


async def test_a_crd_update_is_checked_as_its_create_is(api: httpx.AsyncClient) -> None:
    crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    crd = _crd_with_rule("self.all(x, x > 0)", max_items=10)
    (await api.post(crds, json=crd)).raise_for_status()
    version = copy.deepcopy(crd["spec"]["versions"][0])
    props = version["schema"]["openAPIV3Schema"]["properties"]
    props["spec"]["properties"]["untyped"] = {"description": "no type"}
    answer = await api.patch(
        f"{crds}/widgets.example.com", json={"spec": {"versions": [version]}}, headers=MERGE
    )
    assert answer.status_code == 422, answer.text
    assert "untyped" in answer.text and "type" in answer.text


def test_a_crd_that_describes_its_root_metadata_is_refused() -> None:
    """Until the CRDs were generated, they declared the root metadata with a description:
    apiextensions refuses anything there but its type and name/generateName rules, so no real
    API server would have installed them (this stand-in let them through then)."""
    crd = _crd_with_rule("self.all(x, x > 0)", max_items=10)
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    schema["properties"]["metadata"] = {"type": "object", "description": "Object metadata."}
    assert any("properties[metadata]: Forbidden" in e for e in crd_errors(crd))
    schema["properties"]["metadata"] = {"type": "object"}
    assert crd_errors(crd) == []


def test_preserve_unknown_fields_keeps_unknown_keys_but_prunes_declared_children() -> None:
    """pruning/algorithm.go's skipPrune: what the schema declares below such a node is still
    pruned (the stand-in kept everything there, more lenient than a real server)."""
    from tests.support.structural import prune

    schema = {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
        "properties": {"declared": {"type": "object", "properties": {"a": {"type": "string"}}}},
    }
    value = {"unknown": {"x": 1}, "declared": {"a": "kept", "b": "pruned"}}
    assert prune(schema, value, root=False) == {"unknown": {"x": 1}, "declared": {"a": "kept"}}


@pytest.mark.parametrize(
    ("text", "valid"),
    [
        ("2026-11-28T09:00:00Z", True),
        ("2026-11-28T09:00:00.123+01:00", True),
        ("2026-11-28 09:00:00Z", False),  # a space for the T
        ("2026-11-28T09:00:00+0100", False),  # an offset without its colon
        ("2026-13-45T99:99:99Z", False),  # no such date
    ],
)
def test_date_time_is_checked_as_rfc_3339(text: str, valid: bool) -> None:
    from tests.support.structural import validate

    errors = validate({"type": "string", "format": "date-time"}, text, "status.startTime")
    assert (errors == []) is valid, errors
