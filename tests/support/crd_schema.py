"""The sparkglass CRDs' OpenAPI schemas, as files on disk, and ``jsonschema`` validation
against them (the API server would also apply defaults, pruning and CEL: see
:mod:`tests.support.crd_cel` and :mod:`tests.support.structural`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import yaml

REPO = Path(__file__).resolve().parents[2]
CRDS = {
    "SparkApplication": REPO / "crds" / "sparkapplication.yaml",
    "DataSample": REPO / "crds" / "datasample.yaml",
}


def load_crd(kind: str) -> dict[str, Any]:
    return yaml.safe_load(CRDS[kind].read_text())


def schema_of(kind: str) -> dict[str, Any]:
    (version,) = load_crd(kind)["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]


def validate(kind: str, obj: dict[str, Any]) -> None:
    jsonschema.Draft7Validator(schema_of(kind)).validate(obj)
