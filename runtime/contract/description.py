"""The pipeline description: the JSON contract between the runtime, planner, operator and UI.

A :class:`PipelineDescription` lists every named step (sources, vertices, sinks) with its
inputs, boundedness and declared attributes. :meth:`sparkglass.runtime.Pipeline.describe`
produces one from a live pipeline; the operator builds one from a ``SparkApplication``
spec's ``pipeline.vertices``; the planner and the web page consume it. JSON keys are
camelCase, like the CRDs.
"""

from __future__ import annotations

import re
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from sparkglass.runtime.contract.errors import PipelineError

#: Attribute set on a vertex function by the attribute decorators (a VertexAttributes).
ATTRIBUTES_ATTR = "__sparkglass_attributes__"

#: Kubernetes' DNS-1123 label: vertex names appear in URLs and in label values.
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_MAX_LENGTH = 63


class CamelModel(BaseModel):
    """Base of the JSON contracts: camelCase keys on the wire, unknown keys rejected."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    def to_json_dict(self) -> dict[str, object]:
        """The camelCase JSON-ready dict (the wire form)."""
        return self.model_dump(mode="json", by_alias=True)


class VertexKind(StrEnum):
    """What a named step is."""

    SOURCE = "source"
    VERTEX = "vertex"
    SINK = "sink"


class IdempotentAttribute(CamelModel):
    """``idempotent(key=...)``: each output is the final result for its key at that time."""

    key: list[str] = Field(min_length=1, description="Columns that identify a result.")
    order_by: str | None = Field(
        default=None,
        description=(
            "Column whose largest value marks the latest output of a key within a micro-batch "
            "(event time or sequence number); without it, the last row a task emitted."
        ),
    )


class VertexAttributes(CamelModel):
    """Declared behaviour of a vertex function (the FLIP ProcessFunction attributes)."""

    no_output_until_end_of_input: bool = Field(
        default=False, description="The vertex emits only after all its input ended."
    )
    idempotent: IdempotentAttribute | None = Field(
        default=None, description="Only the latest output per key matters."
    )
    not_cache_record: bool = Field(
        default=False, description="The function keeps no reference to input or output records."
    )


class VertexDescription(CamelModel):
    """One named step of a pipeline."""

    name: str
    kind: VertexKind = VertexKind.VERTEX
    inputs: list[str] = Field(default_factory=list)
    bounded: bool = Field(
        default=True, description="True when the step's output ends (batch), false for a stream."
    )
    python: bool = Field(
        default=False, description="True when the step runs Python code on the executors."
    )
    attributes: VertexAttributes = Field(default_factory=VertexAttributes)


class PipelineDescription(CamelModel):
    """A whole pipeline: its steps in topological order."""

    name: str
    vertices: list[VertexDescription]

    def vertex(self, name: str) -> VertexDescription:
        """The step called ``name``; raises ``KeyError`` listing the known names."""
        for v in self.vertices:
            if v.name == name:
                return v
        raise KeyError(f"no vertex {name!r}; vertices: {', '.join(self.names())}")

    def names(self) -> list[str]:
        return [v.name for v in self.vertices]

    def successors(self, name: str) -> list[str]:
        return [v.name for v in self.vertices if name in v.inputs]


def check_vertex_name(name: object) -> str:
    """Return ``name`` if it is a DNS-1123 label, else raise :class:`PipelineError`."""
    if not isinstance(name, str) or not name:
        raise PipelineError(f"vertex name must be a non-empty string, got {name!r}", vertex=None)
    if len(name) > DNS1123_MAX_LENGTH or not DNS1123_LABEL.match(name):
        raise PipelineError(
            f"vertex name {name!r} is not a DNS-1123 label: 1-63 characters of a-z, 0-9 and '-', "
            "starting and ending with a letter or digit (it appears in URLs and Kubernetes labels)",
            vertex=name,
        )
    return name


def topological_order(vertices: list[VertexDescription]) -> list[VertexDescription]:
    """Check the graph and return its vertices in topological order (stable).

    Raises :class:`PipelineError` naming the offending vertex for a bad or duplicate name,
    an input that names no vertex, a source with inputs, a sink used as an input, a
    non-source without inputs, or a cycle.
    """
    by_name: dict[str, VertexDescription] = {}
    for v in vertices:
        check_vertex_name(v.name)
        if v.name in by_name:
            raise PipelineError(f"duplicate vertex name {v.name!r}", vertex=v.name)
        by_name[v.name] = v
    for v in vertices:
        if v.kind is VertexKind.SOURCE and v.inputs:
            raise PipelineError(f"source {v.name!r} cannot have inputs", vertex=v.name)
        if v.kind is not VertexKind.SOURCE and not v.inputs:
            raise PipelineError(
                f"{v.kind.value} {v.name!r} needs at least one input", vertex=v.name
            )
        for i in v.inputs:
            if i not in by_name:
                raise PipelineError(
                    f"vertex {v.name!r} reads unknown input {i!r}; known: {', '.join(by_name)}",
                    vertex=v.name,
                )
            if by_name[i].kind is VertexKind.SINK:
                raise PipelineError(
                    f"vertex {v.name!r} reads sink {i!r}; a sink has no output", vertex=v.name
                )
    order: list[VertexDescription] = []
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done

    def visit(v: VertexDescription, path: list[str]) -> None:
        mark = state.get(v.name)
        if mark == 2:
            return
        if mark == 1:
            cycle = [*path[path.index(v.name) :], v.name]
            raise PipelineError(
                f"cycle through vertex {v.name!r}: {' <- '.join(cycle)} (each reads the next)",
                vertex=v.name,
            )
        state[v.name] = 1
        for i in v.inputs:
            visit(by_name[i], [*path, v.name])
        state[v.name] = 2
        order.append(v)

    for v in vertices:
        visit(v, [])
    return order
