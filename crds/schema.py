"""Structural OpenAPI v3 schemas, and whole CustomResourceDefinitions, from pydantic models.

The custom resources are written once, as pydantic models (:mod:`.sparkapplication`,
:mod:`.datasample`); the CRD YAML, the chart's copy and the field reference are generated from
them (``make crds``), as controller-gen does for Go operators. pydantic's JSON Schema is close
to what the API server takes; :func:`openapi_schema` settles the differences. Descriptions
are the models' docstrings (``use_attribute_docstrings``): what ``kubectl explain`` prints is
what a reader of the code reads.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, GetJsonSchemaHandler
from pydantic.alias_generators import to_camel
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import CoreSchema, core_schema

#: Key order of a generated schema node (readable YAML; the API server ignores order).
_KEY_ORDER: Final = (
    "type",
    "format",
    "description",
    "required",
    "enum",
    "default",
    "nullable",
    "minimum",
    "exclusiveMinimum",
    "maximum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minProperties",
    "maxProperties",
    "x-kubernetes-int-or-string",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-embedded-resource",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
    "x-kubernetes-validations",
    "properties",
    "items",
    "additionalProperties",
)


class Schema:
    """An annotation that adds keys to a type's schema node: ``Annotated[int, Schema(format=
    "int32")]``, ``Annotated[dict[str, Any], Schema(x_kubernetes_preserve_unknown_fields=
    True)]``. Underscores in key names become dashes (``x_kubernetes_list_type`` →
    ``x-kubernetes-list-type``); other keys are used as given."""

    def __init__(self, **keys: Any) -> None:
        self.keys = {(k.replace("_", "-") if k.startswith("x_") else k): v for k, v in keys.items()}

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        out = dict(handler(schema))
        out.update(copy.deepcopy(self.keys))
        return out


@dataclass(frozen=True)
class Rule:
    """An ``x-kubernetes-validations`` entry on the annotated field (or, in a model's
    ``rules``, on the model's node): a CEL ``rule`` over ``self`` and the ``message`` the API
    server answers when it is false. ``field_path`` names the field the error points at."""

    rule: str
    message: str
    field_path: str | None = None
    reason: str | None = None

    def entry(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rule": " ".join(self.rule.split()), "message": self.message}
        if self.field_path:
            out["fieldPath"] = self.field_path
        if self.reason:
            out["reason"] = self.reason
        return out

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        out = dict(handler(schema))
        out["x-kubernetes-validations"] = [*out.get("x-kubernetes-validations", []), self.entry()]
        return out


def rules(*entries: Rule) -> dict[str, Any]:
    """``json_schema_extra`` for a model whose node carries ``entries``."""
    return {"x-kubernetes-validations": [r.entry() for r in entries]}


class ResourceModel(BaseModel):
    """Base of every model of a custom resource: camelCase names on the wire, descriptions
    from docstrings, unknown keys ignored (the API server prunes them; a newer CRD never
    breaks an older reader)."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="ignore",
        use_attribute_docstrings=True,
    )


class _StructuralJsonSchema(GenerateJsonSchema):
    """pydantic's generator with the choices a structural schema needs."""

    def nullable_schema(self, schema: core_schema.NullableSchema) -> JsonSchemaValue:
        # An optional field is one that may be absent, never one that may be null.
        return self.generate_inner(schema["schema"])

    def default_schema(self, schema: core_schema.WithDefaultSchema) -> JsonSchemaValue:
        out = super().default_schema(schema)
        if out.get("default", 0) is None:
            out.pop("default")
        return out

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


def openapi_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The structural OpenAPI v3 schema of ``model`` (validation mode, wire names).

    What differs from pydantic's JSON Schema, all settled here:

    * ``$ref``/``$defs`` are inlined (a structural schema has no references); a field's own
      description, default and rules override or extend its type's;
    * ``Optional[X]`` is ``X`` that is not required (``anyOf`` with ``null`` is not
      structural);
    * ``title`` goes, a single-value ``const`` becomes an ``enum``;
    * extensions (``x-kubernetes-validations``, formats,
      ``x-kubernetes-preserve-unknown-fields``...) come from the :class:`Schema` and
      :class:`Rule` annotations.

    Raises ``ValueError`` naming the path of a node that cannot be made structural."""
    raw = model.model_json_schema(by_alias=True, schema_generator=_StructuralJsonSchema)
    defs = raw.pop("$defs", {})
    return _structural(raw, defs, "")


def _structural(node: dict[str, Any], defs: dict[str, Any], path: str) -> dict[str, Any]:
    node = dict(node)
    node.pop("title", None)
    if isinstance(node.get("description"), str):
        # Docstrings wrap at the code's width; kubectl explain wraps at the terminal's.
        node["description"] = " ".join(node["description"].split())
    ref = node.pop("$ref", None)
    if ref is None and len(node.get("allOf") or []) == 1:
        ref = node.pop("allOf")[0]["$ref"]
    if ref is not None:
        base = _structural(defs[ref.rsplit("/", 1)[-1]], defs, path)
        own = _structural(node, defs, path)
        merged_rules = base.get("x-kubernetes-validations", []) + own.get(
            "x-kubernetes-validations", []
        )
        base.update(own)
        if merged_rules:
            base["x-kubernetes-validations"] = merged_rules
        return _ordered(base)
    for combinator in ("anyOf", "oneOf", "allOf", "not"):
        if combinator in node:
            raise ValueError(f"{path or '<root>'}: {combinator} is not structural here: {node}")
    if "const" in node:
        node["enum"] = [node.pop("const")]
    if "properties" in node:
        node["properties"] = {
            name: _structural(child, defs, f"{path}.{name}")
            for name, child in node["properties"].items()
        }
        node.setdefault("type", "object")
    if isinstance(node.get("items"), dict):
        node["items"] = _structural(node["items"], defs, f"{path}[]")
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        if extra:
            node["additionalProperties"] = _structural(extra, defs, f"{path}{{}}")
        else:
            node.pop("additionalProperties")
    elif isinstance(extra, bool):
        # false is refused by the API server; true says nothing a structural schema keeps
        # (unknown fields are kept only with x-kubernetes-preserve-unknown-fields).
        node.pop("additionalProperties")
    return _ordered(node)


def _ordered(node: dict[str, Any]) -> dict[str, Any]:
    rank = {k: i for i, k in enumerate(_KEY_ORDER)}
    return dict(sorted(node.items(), key=lambda kv: rank.get(kv[0], len(rank))))


@dataclass(frozen=True)
class PrinterColumn:
    """One ``additionalPrinterColumns`` entry (what ``kubectl get`` shows)."""

    name: str
    type: str
    json_path: str
    description: str | None = None
    priority: int | None = None

    def entry(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "type": self.type}
        if self.description:
            out["description"] = self.description
        out["jsonPath"] = self.json_path
        if self.priority is not None:
            out["priority"] = self.priority
        return out


@dataclass(frozen=True)
class CustomResource:
    """A custom resource's definition: names, the model of the whole object, columns.

    ``model`` is the object (``apiVersion``, ``kind``, ``metadata``, ``spec``, ``status``);
    ``comment`` opens the generated YAML file."""

    group: str
    version: str
    kind: str
    plural: str
    singular: str
    model: type[BaseModel]
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    columns: tuple[PrinterColumn, ...] = ()
    comment: str = ""
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.plural}.{self.group}"

    def definition(self) -> dict[str, Any]:
        """The ``apiextensions.k8s.io/v1`` CustomResourceDefinition."""
        names: dict[str, Any] = {
            "kind": self.kind,
            "listKind": f"{self.kind}List",
            "plural": self.plural,
            "singular": self.singular,
        }
        if self.short_names:
            names["shortNames"] = list(self.short_names)
        if self.categories:
            names["categories"] = list(self.categories)
        version: dict[str, Any] = {
            "name": self.version,
            "served": True,
            "storage": True,
            "subresources": {"status": {}},
        }
        if self.columns:
            version["additionalPrinterColumns"] = [c.entry() for c in self.columns]
        version["schema"] = {"openAPIV3Schema": openapi_schema(self.model)}
        metadata: dict[str, Any] = {"name": self.name}
        if self.labels:
            metadata["labels"] = dict(self.labels)
        return {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": metadata,
            "spec": {
                "group": self.group,
                "scope": "Namespaced",
                "names": names,
                "versions": [version],
            },
        }


def walk(node: dict[str, Any], path: str = "") -> Iterable[tuple[str, dict[str, Any]]]:
    """Every schema node under ``node`` with its path (``.spec.driver.env[]``, ``{}`` for a
    map's values), ``node`` itself first (path ``""``)."""
    yield path, node
    for name, child in (node.get("properties") or {}).items():
        yield from walk(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk(node["additionalProperties"], f"{path}{{}}")
