"""A minimal CRD for another operator's ``SparkApplication`` (Kubeflow's, the Apache Spark
operator's): enough for the test API server to store and serve one, with a status
subresource. Written here, not copied: those operators' own schemas validate fields
sparkglass never reads."""

from __future__ import annotations

from typing import Any


def sparkapplication_crd(group: str, version: str, schema: dict[str, Any]) -> dict[str, Any]:
    """The ``CustomResourceDefinition`` of ``sparkapplications.<group>`` served at
    ``version``, with ``schema`` as its ``openAPIV3Schema``."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"sparkapplications.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {
                "kind": "SparkApplication",
                "listKind": "SparkApplicationList",
                "plural": "sparkapplications",
                "singular": "sparkapplication",
                "shortNames": ["sparkapp"],
            },
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }
