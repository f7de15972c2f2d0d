"""What kube-apiserver does with a custom resource before it stores it, and with a CRD.

The test API server (:mod:`tests.support.kube_apiserver`) runs every custom resource it
stores through :func:`admit`, in the API server's order (apiextensions-apiserver
``pkg/apiserver/customresource_handler.go`` and ``pkg/registry/customresource/strategy.go``):
prune unknown fields (``schema/pruning/algorithm.go``), drop nulls the schema does not allow,
apply defaults (``schema/defaulting/algorithm.go``), then validate the OpenAPI schema
(kube-openapi, messages as ``pkg/apiserver/validation/validation.go`` maps them), then the CEL
rules (``pkg/apiserver/schema/cel/validation.go``) with the runtime cost limits, and answer
422 with the field errors a real server gives. :func:`crd_errors` is the check a CRD gets
when it is applied: structural-schema rules (``pkg/apiserver/schema/validation.go``) and the
estimated cost of its rules (:mod:`tests.support.cel_cost`).

Messages follow Kubernetes 1.32+ wording. Where the stand-in still differs from a real
server, docs/api-server-rules.md says so.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any, Final

import celpy
import re2

from . import cel_cost

#: Kinds of field error whose presence skips the CEL rules (``validation.go``).
_BLOCKS_CEL: Final = {"Unsupported value", "Required value", "Too long", "Too many", "TypeInvalid"}
#: ``TotalAnnotationSizeLimitB``.
MAX_ANNOTATIONS_BYTES: Final = 256 * 1024
#: etcd's default ``--max-request-bytes``: larger objects are never stored.
MAX_OBJECT_BYTES: Final = 1536 * 1024
#: ``MaxSecretSize``: what a ConfigMap's or a Secret's values may hold together.
MAX_CONFIG_BYTES: Final = 1024 * 1024
#: ``MaxRequestBodyBytes``: larger request bodies are refused unread.
MAX_REQUEST_BYTES: Final = 3 * 1024 * 1024
_DNS1123_SUBDOMAIN: Final = re.compile(
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
)
_LABEL_NAME: Final = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DATE_TIME: Final = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})")


@dataclass(frozen=True)
class FieldError:
    """One field error as the API server prints it: ``<field>: <kind>[: <detail>]``."""

    field: str
    kind: str
    detail: str = ""
    reason: str = "FieldValueInvalid"

    def __str__(self) -> str:
        return f"{self.field}: {self.kind}" + (f": {self.detail}" if self.detail else "")

    def cause(self) -> dict[str, str]:
        message = self.kind + (f": {self.detail}" if self.detail else "")
        return {"reason": self.reason, "message": message, "field": self.field}


class Invalid(Exception):
    """The object is refused with 422 ``Invalid``: ``errors`` say why."""

    def __init__(self, kind: str, name: str, errors: list[FieldError]) -> None:
        self.kind, self.name, self.errors = kind, name, errors
        agg = str(errors[0]) if len(errors) == 1 else "[" + ", ".join(map(str, errors)) + "]"
        super().__init__(f'{kind} "{name}" is invalid: {agg}')


def _value(v: Any) -> str:
    return json.dumps(v) if not isinstance(v, int | float) or isinstance(v, bool) else str(v)


# ------------------------------------------------------------------------- pruning etc.
def prune(schema: dict[str, Any], value: Any, *, root: bool = True) -> Any:
    """``value`` without the fields ``schema`` does not declare (the API server deletes them
    silently). At the root ``apiVersion``, ``kind`` and ``metadata`` are kept."""
    return _prune(schema, value, root, skip=False)


def _prune(schema: dict[str, Any] | None, value: Any, root: bool, skip: bool) -> Any:
    # pruning/algorithm.go: under x-kubernetes-preserve-unknown-fields ("skipPrune") unknown
    # keys stay, but declared properties and additionalProperties are pruned as usual; list
    # items keep the mode of their list.
    if schema is None:
        return value if skip else ({} if isinstance(value, dict) else value)
    keep_unknown = skip or bool(schema.get("x-kubernetes-preserve-unknown-fields"))
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        out = {}
        for key, child in value.items():
            if root and key in ("apiVersion", "kind", "metadata"):
                out[key] = child
            elif key in props:
                out[key] = _prune(props[key], child, False, False)
            elif isinstance(extra, dict):
                out[key] = _prune(extra, child, False, False)
            elif keep_unknown:
                out[key] = child
        return out
    if isinstance(value, list):
        items = schema.get("items") if isinstance(schema.get("items"), dict) else None
        return [_prune(items, v, False, keep_unknown) if items is not None else v for v in value]
    return value


def drop_nulls(schema: dict[str, Any], value: Any) -> Any:
    """``PruneNonNullableNullsWithoutDefaults``: a ``null`` where the schema allows none and
    has no default is deleted, not refused."""
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        out = {}
        for key, child in value.items():
            node = props.get(key) or (extra if isinstance(extra, dict) else None)
            if (
                child is None
                and node is not None
                and not node.get("nullable")
                and ("default" not in node)
            ):
                continue
            out[key] = drop_nulls(node, child) if node is not None else child
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [drop_nulls(schema["items"], v) for v in value]
    return value


def default(schema: dict[str, Any], value: Any) -> Any:
    """The schema's defaults applied (only inside objects that exist, as the API server does;
    a non-nullable ``null`` with a default becomes the default)."""
    if isinstance(value, dict):
        out = dict(value)
        props = schema.get("properties") or {}
        for key, node in props.items():
            if "default" in node and (
                key not in out or (out[key] is None and not node.get("nullable"))
            ):
                out[key] = copy.deepcopy(node["default"])
        extra = schema.get("additionalProperties")
        for key in list(out):
            node = props.get(key) or (extra if isinstance(extra, dict) else None)
            if node is not None:
                out[key] = default(node, out[key])
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        items = schema["items"]
        return [
            default(
                items, copy.deepcopy(items["default"]) if v is None and "default" in items else v
            )
            for v in value
        ]
    return value


# ------------------------------------------------------------------------- OpenAPI validation
_NONE: Final = object()


def validate(
    schema: dict[str, Any], value: Any, path: str = "", old: Any = _NONE
) -> list[FieldError]:
    """kube-openapi's checks of ``value`` against ``schema`` (structural, after pruning and
    defaulting), as field errors with the API server's wording. With ``old`` (an update),
    a value equal to the old one is not checked again: validation ratcheting, on by default
    since Kubernetes 1.30, so an object stored before a rule existed can still be written."""
    return list(_validate(schema, value, path, old))


def _type_ok(kind: str | None, value: Any) -> bool:
    if kind is None:
        return True
    if kind == "object":
        return isinstance(value, dict)
    if kind == "array":
        return isinstance(value, list)
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    return True


def _is_date_time(value: str) -> bool:
    """strfmt ``IsDateTime``: RFC 3339 with 'T' and a 'Z' or +hh:mm offset, real dates."""
    if not _DATE_TIME.fullmatch(value):
        return False
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


@lru_cache(maxsize=512)
def _pattern(pattern: str) -> Any:
    return re2.compile(pattern)


def _validate(schema: dict[str, Any], value: Any, path: str, old: Any) -> Iterator[FieldError]:
    if old is not _NONE and old == value:
        return
    at = path.lstrip(".") or "<root>"
    if value is None:
        if not schema.get("nullable"):
            yield FieldError(
                at,
                "Invalid value",
                f'"null": {at} in body must be of type {schema.get("type")}: "null"',
                "FieldValueTypeInvalid",
            )
        return
    if schema.get("x-kubernetes-int-or-string"):
        if not (isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))):
            yield FieldError(
                at,
                "Invalid value",
                f"{_value(value)}: {at} in body must be of type integer,string: {_value(value)}",
                "FieldValueTypeInvalid",
            )
            return
    elif not _type_ok(schema.get("type"), value):
        shown = f": {_value(value)}" if isinstance(value, str) else ""
        yield FieldError(
            at,
            "Invalid value",
            f'"{_go_type(value)}": {at} in body must be of type {schema.get("type")}{shown}',
            "FieldValueTypeInvalid",
        )
        return
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(_value(v) for v in schema["enum"])
        yield FieldError(
            at,
            "Unsupported value",
            f"{_value(value)}: supported values: {allowed}",
            "FieldValueNotSupported",
        )
    if isinstance(value, str):
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            yield FieldError(
                at,
                "Too long",
                f"may not be more than {schema['maxLength']} bytes",
                "FieldValueTooLong",
            )
        if "minLength" in schema and len(value) < schema["minLength"]:
            yield FieldError(
                at,
                "Invalid value",
                f"{_value(value)}: {at} in body should be at least {schema['minLength']} chars "
                "long",
            )
        if "pattern" in schema and not _pattern(schema["pattern"]).search(value):
            yield FieldError(
                at,
                "Invalid value",
                f"{_value(value)}: {at} in body should match '{schema['pattern']}'",
            )
        if schema.get("format") == "date-time" and not _is_date_time(value):
            yield FieldError(
                at,
                "Invalid value",
                f"{_value(value)}: {at} in body must be of type date-time: {_value(value)}",
            )
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            yield FieldError(
                at,
                "Invalid value",
                f"{_value(value)}: {at} in body should be greater than or equal to "
                f"{schema['minimum']}",
            )
        if "maximum" in schema and value > schema["maximum"]:
            yield FieldError(
                at,
                "Invalid value",
                f"{_value(value)}: {at} in body should be less than or equal to "
                f"{schema['maximum']}",
            )
    if isinstance(value, list):
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            yield FieldError(
                at,
                "Too many",
                f"{len(value)}: must have at most {schema['maxItems']} items",
                "FieldValueTooMany",
            )
        if "minItems" in schema and len(value) < schema["minItems"]:
            yield FieldError(
                at,
                "Invalid value",
                f"{len(value)}: {at} in body should have at least {schema['minItems']} items",
            )
        items = schema.get("items")
        if isinstance(items, dict):
            keys = schema.get("x-kubernetes-list-map-keys") or []
            correlated = schema.get("x-kubernetes-list-type") == "map" and old is not _NONE
            for i, v in enumerate(value):
                # Ratcheting follows an item of a list-map to its old version by its keys.
                before = _correlated(old, v, keys) if correlated else None
                yield from _validate(items, v, f"{path}[{i}]", _NONE if before is None else before)
        yield from _list_type_errors(schema, value, at)
    if isinstance(value, dict):
        for name in schema.get("required") or []:
            if name not in value:
                yield FieldError(
                    f"{path}.{name}".lstrip("."), "Required value", reason="FieldValueRequired"
                )
        if "maxProperties" in schema and len(value) > schema["maxProperties"]:
            yield FieldError(
                at,
                "Too many",
                f"{len(value)}: must have at most {schema['maxProperties']} items",
                "FieldValueTooMany",
            )
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        olds = old if isinstance(old, dict) else {}
        for key, v in value.items():
            if key in props:
                yield from _validate(props[key], v, f"{path}.{key}", olds.get(key, _NONE))
            elif isinstance(extra, dict):
                yield from _validate(extra, v, f"{path}[{key}]", olds.get(key, _NONE))


def _go_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return {dict: "object", list: "array", str: "string"}.get(type(value), "null")


def _list_type_errors(schema: dict[str, Any], value: list[Any], at: str) -> Iterator[FieldError]:
    kind = schema.get("x-kubernetes-list-type")
    if kind == "set":
        seen: list[Any] = []
        for i, v in enumerate(value):
            if v in seen:
                yield FieldError(f"{at}[{i}]", "Duplicate value", _value(v), "FieldValueDuplicate")
            seen.append(v)
    elif kind == "map":
        keys = schema.get("x-kubernetes-list-map-keys") or []
        seen_keys: list[Any] = []
        for i, v in enumerate(value):
            k = {name: v.get(name) for name in keys} if isinstance(v, dict) else v
            if k in seen_keys:
                yield FieldError(
                    f"{at}[{i}]", "Duplicate value", json.dumps(k), "FieldValueDuplicate"
                )
            seen_keys.append(k)


# ------------------------------------------------------------------------- CEL rules
@lru_cache(maxsize=1024)
def compiled_rule(rule: str) -> Any:
    """The CEL program of ``rule``, compiled once per process."""
    env = celpy.Environment()
    return env.program(env.compile(rule))


def _schema_type_name(schema: dict[str, Any]) -> str:
    return str(schema.get("type") or "object")


def cel_errors(
    schema: dict[str, Any], value: Any, old: Any = None, *, path: str = ""
) -> list[FieldError]:
    """The errors of every ``x-kubernetes-validations`` rule on ``value`` (``old``: the
    stored object on an update; transition rules run only where it has the same field), with
    cel-go's runtime limits: 1,000,000 per evaluation, 10,000,000 for the whole object."""
    budget = [cel_cost.RUNTIME_BUDGET]
    out: list[FieldError] = []
    _cel(schema, value, old, path, budget, out)
    return out


def _cel(
    schema: dict[str, Any],
    value: Any,
    old: Any,
    path: str,
    budget: list[int],
    out: list[FieldError],
) -> None:
    if value is None:
        return
    if old is not None and old == value:
        return  # ratcheting: an unchanged value is not checked again
    at = path.lstrip(".") or "<root>"
    for entry in schema.get("x-kubernetes-validations") or []:
        rule = entry["rule"]
        if "oldSelf" in rule and old is None:
            continue  # a transition rule: only on an update of an existing value
        cost = cel_cost.runtime_cost(schema, rule, value)
        if cost > cel_cost.PER_CALL_LIMIT:
            out.append(
                FieldError(
                    at,
                    "Invalid value",
                    "'operation cancelled: actual cost limit exceeded': no further validation "
                    f"rules will be run due to call cost exceeds limit for rule: {rule}",
                )
            )
            return
        if cost > budget[0]:
            out.append(
                FieldError(
                    at,
                    "Invalid value",
                    "validation failed due to running out of cost budget, no further "
                    "validation rules will be run",
                )
            )
            return
        budget[0] -= cost
        activation = {"self": celpy.json_to_cel(value)}
        if old is not None:
            activation["oldSelf"] = celpy.json_to_cel(old)
        try:
            ok = bool(compiled_rule(rule).evaluate(activation))
        except celpy.CELEvalError as exc:
            out.append(
                FieldError(at, "Invalid value", f"{_value(_schema_type_name(schema))}: {exc}")
            )
            continue
        if not ok:
            message = " ".join(str(entry.get("message") or f"failed rule: {rule}").split())
            field = f"{at}{entry['fieldPath']}" if entry.get("fieldPath") else at
            out.append(
                FieldError(
                    field, "Invalid value", f"{_value(_schema_type_name(schema))}: {message}"
                )
            )
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, v in value.items():
            node = props.get(key) or (extra if isinstance(extra, dict) else None)
            if node is None:
                continue
            child_old = old.get(key) if isinstance(old, dict) else None
            child_path = f"{path}.{key}" if key in props else f"{path}[{key}]"
            _cel(node, v, child_old, child_path, budget, out)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        keys = schema.get("x-kubernetes-list-map-keys") or []
        for i, v in enumerate(value):
            child_old = (
                _correlated(old, v, keys) if schema.get("x-kubernetes-list-type") == "map" else None
            )
            _cel(schema["items"], v, child_old, f"{path}[{i}]", budget, out)


def _correlated(old: Any, item: Any, keys: list[str]) -> Any:
    # Transition rules in list items see the old item with the same map keys (and none
    # elsewhere): items of other lists cannot be correlated.
    if not isinstance(old, list) or not isinstance(item, dict):
        return None
    for candidate in old:
        if isinstance(candidate, dict) and all(candidate.get(k) == item.get(k) for k in keys):
            return candidate
    return None


# ------------------------------------------------------------------------- metadata
def _qualified_name(key: str) -> bool:
    """apimachinery ``IsQualifiedName``: ``[prefix/]name``, prefix a DNS-1123 subdomain of at
    most 253 characters, name 1-63 characters."""
    prefix, slash, name = key.rpartition("/")
    if slash and not (0 < len(prefix) <= 253 and _DNS1123_SUBDOMAIN.fullmatch(prefix)):
        return False
    return 0 < len(name) <= 63 and _LABEL_NAME.fullmatch(name) is not None


def metadata_errors(
    meta: dict[str, Any], *, name_pattern: re.Pattern[str] = _DNS1123_SUBDOMAIN
) -> list[FieldError]:
    """ObjectMeta checks every object gets: the name, labels, the annotations' total size."""
    errors: list[FieldError] = []
    name = meta.get("name")
    if name is not None and (len(name) > 253 or not name_pattern.fullmatch(name)):
        errors.append(
            FieldError(
                "metadata.name",
                "Invalid value",
                f"{_value(name)}: a lowercase RFC 1123 subdomain must consist of lower case "
                "alphanumeric characters, '-' or '.', and must start and end with an "
                "alphanumeric character",
            )
        )
    for key in meta.get("annotations") or {}:
        if not _qualified_name(key.lower()):
            errors.append(
                FieldError(
                    "metadata.annotations",
                    "Invalid value",
                    f"{_value(key)}: name part must consist of alphanumeric characters, '-', '_' "
                    "or '.', and must start and end with an alphanumeric character",
                )
            )
    for key, label in (meta.get("labels") or {}).items():
        if not _qualified_name(key):
            errors.append(
                FieldError(
                    "metadata.labels",
                    "Invalid value",
                    f"{_value(key)}: name part must consist of alphanumeric characters, '-', "
                    "'_' or '.', and must start and end with an alphanumeric character",
                )
            )
        if (
            not isinstance(label, str)
            or len(label) > 63
            or (label and not _LABEL_NAME.fullmatch(label))
        ):
            errors.append(
                FieldError(
                    "metadata.labels",
                    "Invalid value",
                    f"{_value(label)}: a valid label must be an empty string or consist of "
                    "alphanumeric characters, '-', '_' or '.', and must start and end with an "
                    "alphanumeric character",
                )
            )
    annotations = meta.get("annotations") or {}
    size = sum(len(k.encode()) + len(str(v).encode()) for k, v in annotations.items())
    if size > MAX_ANNOTATIONS_BYTES:
        errors.append(
            FieldError(
                "metadata.annotations",
                "Too long",
                f"may not be more than {MAX_ANNOTATIONS_BYTES} bytes",
                "FieldValueTooLong",
            )
        )
    return errors


# ------------------------------------------------------------------------- a whole object
def admit(
    schema: dict[str, Any],
    obj: dict[str, Any],
    old: dict[str, Any] | None = None,
    *,
    kind: str,
    group: str,
) -> dict[str, Any]:
    """The object the API server would store for ``obj`` (``old``: the stored one on an
    update): pruned, nulls dropped, defaulted, then validated. Raises :class:`Invalid` with
    every field error, as the 422 a real server answers."""
    obj = default(schema, drop_nulls(schema, prune(schema, obj)))
    errors = metadata_errors(obj.get("metadata") or {})
    body = {k: v for k, v in obj.items() if k != "metadata"}
    old_body = _NONE if old is None else {k: v for k, v in old.items() if k != "metadata"}
    errors += validate(schema, body, old=old_body)
    if not any(e.kind in _BLOCKS_CEL or e.reason == "FieldValueTypeInvalid" for e in errors):
        errors += cel_errors(cel_cost.with_root_metadata(schema), obj, old)
    else:
        errors.append(
            FieldError(
                "<nil>",
                "Invalid value",
                '"null": some validation rules were not checked because the object was '
                "invalid; correct the existing errors to complete validation",
            )
        )
    if errors:
        name = (obj.get("metadata") or {}).get("name", "")
        raise Invalid(f"{kind}.{group}", name, errors)
    return obj


def object_too_large(obj: dict[str, Any]) -> bool:
    """Whether etcd refuses ``obj`` (its JSON over the 1.5 MiB request limit)."""
    return len(json.dumps(obj, separators=(",", ":")).encode()) > MAX_OBJECT_BYTES


# ------------------------------------------------------------------------- a CRD
_FORBIDDEN_KEYS: Final = {
    "$ref": "$ref is not supported",
    "id": "id is not supported",
    "definitions": "definitions is not supported",
    "dependencies": "dependencies is not supported",
    "patternProperties": "patternProperties is not supported",
    "additionalItems": "additionalItems is not supported",
}
_TYPES: Final = {"string", "number", "integer", "boolean", "array", "object"}
#: Keys allowed at the root of a schema when the status subresource is on.
_ROOT_KEYS: Final = {
    "description",
    "type",
    "format",
    "title",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "maxItems",
    "minItems",
    "uniqueItems",
    "multipleOf",
    "required",
    "items",
    "properties",
    "externalDocs",
    "example",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-validations",
}


def crd_errors(crd: dict[str, Any]) -> list[str]:
    """Why the API server refuses ``crd`` (empty: it accepts it): its schemas must be
    structural, defaults pruned and valid, list-map keys required, the root only what the
    status subresource allows, and the rules' estimated cost within the limits."""
    # Judged once per content: every test's API server establishes the same CRDs.
    return list(_crd_errors_of(json.dumps(crd, sort_keys=True)))


@lru_cache(maxsize=64)
def _crd_errors_of(text: str) -> tuple[str, ...]:
    return tuple(_judge_crd(json.loads(text)))


def _judge_crd(crd: dict[str, Any]) -> list[str]:
    errors: list[str] = []
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    if (crd.get("metadata") or {}).get("name") != f"{names.get('plural')}.{spec.get('group')}":
        errors.append('metadata.name: Invalid value: must be spec.names.plural+"."+spec.group')
    for i, version in enumerate(spec.get("versions") or []):
        at = f"spec.versions[{i}].schema.openAPIV3Schema"
        schema = (version.get("schema") or {}).get("openAPIV3Schema")
        if not isinstance(schema, dict):
            errors.append(f"{at}: Required value: because otherwise all fields are pruned")
            continue
        if schema.get("type") != "object":
            errors.append(f"{at}.type: Invalid value: must be object at the root")
        if "status" in (version.get("subresources") or {}):
            extra = set(schema) - _ROOT_KEYS
            if extra:
                errors.append(
                    f"{at}: Forbidden: only {sorted(_ROOT_KEYS)} fields are allowed at the "
                    f"root of the schema if the status subresource is enabled ({sorted(extra)})"
                )
        # validateStructuralMetadataInvariants: at the root, metadata may say its type and
        # restrict name and generateName, nothing else (not even a description).
        meta = (schema.get("properties") or {}).get("metadata")
        if meta is not None and (
            set(meta) - {"type", "properties"}
            or set(meta.get("properties") or {}) - {"name", "generateName"}
            or meta.get("type") not in (None, "object")
        ):
            errors.append(
                f"{at}.properties[metadata]: Forbidden: must not specify anything other than "
                "name and generateName, but metadata is implicitly specified"
            )
        for path, node in _nodes(schema, at):
            errors += _node_errors(node, path)
        errors += [f"{at}: Forbidden: {e}" for e in cel_cost.crd_cost_errors(schema)]
    return errors


def _nodes(node: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for name, child in (node.get("properties") or {}).items():
        yield from _nodes(child, f"{path}.properties[{name}]")
    if isinstance(node.get("items"), dict):
        yield from _nodes(node["items"], f"{path}.items")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _nodes(node["additionalProperties"], f"{path}.additionalProperties")


def _node_errors(node: dict[str, Any], path: str) -> list[str]:
    errors = [
        f"{path}.{key}: Forbidden: {why}" for key, why in _FORBIDDEN_KEYS.items() if key in node
    ]
    special = node.get("x-kubernetes-int-or-string") or node.get(
        "x-kubernetes-preserve-unknown-fields"
    )
    kind = node.get("type")
    if kind is None and not special:
        errors.append(f"{path}.type: Required value: must not be empty for specified object fields")
    elif kind is not None and kind not in _TYPES:
        errors.append(f"{path}.type: Unsupported value: {_value(kind)}")
    for junctor in ("allOf", "anyOf", "oneOf", "not"):
        if junctor in node:
            errors.append(
                f"{path}.{junctor}: Forbidden: value validations are not used by sparkglass's "
                "CRDs and not checked by this stand-in"
            )
    if kind == "array" and not isinstance(node.get("items"), dict):
        errors.append(f"{path}.items: Required value: must be specified")
    if "properties" in node and isinstance(node.get("additionalProperties"), dict):
        errors.append(
            f"{path}.additionalProperties: Forbidden: additionalProperties and properties are "
            "mutual exclusive"
        )
    if node.get("additionalProperties") is False:
        errors.append(f"{path}.additionalProperties: Forbidden: must not be false")
    if node.get("uniqueItems") is True:
        errors.append(
            f"{path}.uniqueItems: Forbidden: uniqueItems cannot be set to true since the "
            "runtime complexity becomes quadratic"
        )
    if node.get("x-kubernetes-preserve-unknown-fields") is False:
        errors.append(
            f"{path}.x-kubernetes-preserve-unknown-fields: Invalid value: false: must be true "
            "or undefined"
        )
    if node.get("x-kubernetes-list-type") == "map":
        items = node.get("items") or {}
        for key in node.get("x-kubernetes-list-map-keys") or []:
            child = (items.get("properties") or {}).get(key)
            if child is None:
                errors.append(
                    f"{path}.x-kubernetes-list-map-keys: Invalid value: {_value(key)}: entries "
                    "must all be names of item properties"
                )
            elif key not in (items.get("required") or []) and "default" not in child:
                errors.append(
                    f"{path}.items.properties[{key}]: Invalid value: this property is in "
                    "x-kubernetes-list-map-keys, so it must have a default or be a required "
                    "property"
                )
    if "pattern" in node:
        try:
            _pattern(node["pattern"])
        except Exception as exc:
            errors.append(
                f"{path}.pattern: Invalid value: {_value(node['pattern'])}: must be a valid "
                f"regular expression, but isn't: {exc}"
            )
    if "default" in node:
        sub = {k: v for k, v in node.items() if k != "default"}
        if prune(sub, node["default"], root=False) != node["default"]:
            errors.append(f"{path}.default: Invalid value: must not have unknown fields")
        errors += [f"{path}.default: {e}" for e in validate(sub, node["default"])]
    return errors


def parse_time(value: str) -> datetime:
    """An RFC 3339 timestamp as Kubernetes writes them."""
    return datetime.fromisoformat(value.replace("Z", "+00:00"))
