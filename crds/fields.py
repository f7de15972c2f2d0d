"""Field types both custom resources use: integers with a format, names, durations, conditions.

Each type carries its schema (bounds, pattern, format, CEL rule) and the check the models
run when they parse a stored object, so the API server and the readers agree on one
definition. Durations use the one grammar of :mod:`sparkglass.runtime.contract.durations`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    ValidationInfo,
)
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

from sparkglass.runtime.contract.durations import DURATION_PATTERN, parse_duration_ms
from sparkglass.runtime.contract.errors import InvalidParameterError

from .schema import ResourceModel, Rule, Schema

Int32 = Annotated[int, Schema(format="int32")]
Int64 = Annotated[int, Schema(format="int64")]

#: A DNS-1123 label (vertex, expectation and container names).
DNS1123_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
#: A DNS-1123 subdomain (object names).
DNS1123_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"

#: A label value (apimachinery ``IsValidLabelValue``): empty, or alphanumerics with '-', '_'
#: and '.' inside, at most 63 characters.
LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
#: A label or annotation key (``IsQualifiedName``): an optional DNS-1123 subdomain prefix and
#: '/', then a name of alphanumerics with '-', '_' and '.' inside, at most 63 characters.
QUALIFIED_NAME_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_QUALIFIED_NAME = re.compile(QUALIFIED_NAME_PATTERN)


def _qualified_keys(value: dict[str, str]) -> dict[str, str]:
    for key in value:
        if len(key) > 317 or not _QUALIFIED_NAME.match(key):
            raise ValueError(
                f"{key[:80]!r} is not a label or annotation key: an optional DNS subdomain and "
                "'/', then 1-63 alphanumerics, '-', '_' or '.', starting and ending with an "
                "alphanumeric"
            )
    return value


# Keys of a map cannot be bounded by its schema; a rule does it (a map key costs the API
# server's estimate nothing, so a regex over each key is cheap).
_KEY_RULE = Rule(
    f"self.all(k, size(k) <= 317 && k.matches('{QUALIFIED_NAME_PATTERN}'))",
    "keys must be qualified names: an optional DNS subdomain prefix and '/', then 1-63 "
    "alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric",
)
#: Labels added to an object the operator makes (values checked as the API server does).
Labels = Annotated[
    dict[
        str,
        Annotated[
            str,
            Field(max_length=63),
            Schema(pattern=LABEL_VALUE_PATTERN, description="A label value."),
        ],
    ],
    Field(max_length=64),
    AfterValidator(_qualified_keys),
    _KEY_RULE,
]
#: Annotations added to an object the operator makes (keys checked as the API server does;
#: their total size is the API server's to bound, 256 KiB).
Annotations = Annotated[
    dict[str, Annotated[str, Schema(description="An annotation value.")]],
    Field(max_length=64),
    AfterValidator(_qualified_keys),
    _KEY_RULE,
]

#: The object's ``metadata``: the API server's own schema applies, and a CRD may say nothing
#: of it but its type (apiextensions' structural-schema check refuses even a description).
Metadata = Annotated[dict[str, Any], Schema(type="object")]

#: Longest duration string a CRD accepts (``1h0m0s500ms`` is 11).
DURATION_MAX_LENGTH = 16


def parse_duration(text: str, *, field: str = "duration") -> float:
    """Seconds (float) in a duration of the one grammar (``3s``, ``1500ms``, ``1m30s``).

    Raises :class:`~sparkglass.runtime.contract.errors.SamplingSettingsError` (a
    ``ValueError``) naming ``field`` when ``text`` is not such a duration."""
    return parse_duration_ms(text, field=field) / 1000


def _check_duration(value: str, info: ValidationInfo) -> str:
    # Checked on parse, so a malformed duration fails the spec where the API server did not
    # check it (an object written before the rule existed), not later in the driver.
    parse_duration(value, field=to_camel(info.field_name or "duration"))
    return value


@dataclass(frozen=True)
class DurationRange:
    """An annotation bounding a :data:`Duration` to ``low``-``high``: a CEL rule in the CRD and,
    unless ``on_parse`` is false, the same check on parse, both naming ``name`` (the field as
    users write it). ``on_parse=False`` where a reader checks the range itself against a
    bound of its own (the driver's settings, the application's window)."""

    low: str
    high: str
    name: str
    on_parse: bool = True

    def _check(self, value: str) -> str:
        seconds = parse_duration(value, field=self.name)
        if not parse_duration(self.low) <= seconds <= parse_duration(self.high):
            raise InvalidParameterError(
                f"{self.name}={value} is out of range: allowed {self.low}–{self.high}",
                field=self.name,
            )
        return value

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        if not self.on_parse:
            return handler(source)
        return core_schema.no_info_after_validator_function(self._check, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        rule = Rule(
            f"duration(self) >= duration('{self.low}') && duration(self) <= "
            f"duration('{self.high}')",
            f"{self.name} must be between {self.low} and {self.high}",
        )
        return rule.__get_pydantic_json_schema__(schema, handler)


Duration = Annotated[
    str,
    Schema(maxLength=DURATION_MAX_LENGTH, pattern=DURATION_PATTERN),
    AfterValidator(_check_duration),
]


class Condition(ResourceModel):
    """One condition (metav1.Condition)."""

    type: Annotated[str, Field(max_length=316)]
    """Condition type, e.g. Ready."""
    status: Annotated[str, Schema(enum=["True", "False", "Unknown"])]
    """True, False or Unknown."""
    reason: Annotated[str, Field(max_length=1024)] | None = None
    """CamelCase machine-readable reason of the last transition."""
    message: Annotated[str, Field(max_length=32768)] | None = None
    """Human-readable detail."""
    last_transition_time: Annotated[str, Schema(format="date-time")] | None = None
    """When status last changed (RFC 3339)."""
    observed_generation: Int64 | None = None
    """The metadata.generation the condition was set for."""


#: ``status.conditions``: a list keyed by ``type``, as every Kubernetes API has it.
Conditions = Annotated[
    list[Condition],
    Schema(x_kubernetes_list_type="map", x_kubernetes_list_map_keys=["type"]),
]


@dataclass(frozen=True)
class AsWritten:
    """An annotation for a Kubernetes object the operator passes on into a Pod as the user
    wrote it (a Volume, a Toleration, a container): ``Annotated[dict[str, Any],
    AsWritten(Toleration)]``. The CRD's schema is ``model``'s; on parse the value is checked
    against ``model`` (errors name the field) and kept as the dict, so nothing the API server
    stored is rewritten on its way into the Pod."""

    model: type[ResourceModel]

    def _check(self, value: Any) -> Any:
        self.model.model_validate(value)
        return value

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(self._check, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return handler(self.model.__pydantic_core_schema__)


def no_schema_default(schema: dict[str, Any]) -> None:
    """``json_schema_extra`` of a field whose default is the readers' only, not the API
    server's: the CRD gets none (defaulting it there would change stored objects, and with them
    the spec hash of every running application, on upgrade)."""
    schema.pop("default", None)
