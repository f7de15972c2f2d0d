"""The sparkglass CRDs' OpenAPI schemas, as files on disk, and ``jsonschema`` validation
against them (the API server would also apply defaults, pruning and CEL: see
:mod:`tests.support.crd_cel` and :mod:`tests.support.structural`)."""

from __future__ import annotations

import copy
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

REPO = Path(__file__).resolve().parents[2]
CRDS = {
    "SparkApplication": REPO / "crds" / "sparkapplication.yaml",
    "DataSample": REPO / "crds" / "datasample.yaml",
}


@lru_cache(maxsize=64)
def _parsed(path: Path, mtime_ns: int, size: int) -> tuple[Any, ...]:
    # libyaml's loader: the pure-Python one took about 1.7 s per CRD file, and the operator
    # tests read the CRDs for every API server they start and every rule they check.
    return tuple(
        yaml.load_all(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    )


def yaml_documents(path: Path) -> list[Any]:
    """The YAML documents of ``path``, parsed once per version of the file; each call gets
    its own copy to change."""
    stat = path.stat()
    return copy.deepcopy(list(_parsed(path.resolve(), stat.st_mtime_ns, stat.st_size)))


def load_crd(kind: str) -> dict[str, Any]:
    (crd,) = yaml_documents(CRDS[kind])
    result: dict[str, Any] = crd
    return result


def schema_of(kind: str) -> dict[str, Any]:
    (version,) = load_crd(kind)["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]


def validate(kind: str, obj: dict[str, Any]) -> None:
    jsonschema.Draft7Validator(schema_of(kind)).validate(obj)
