"""The API server's cost of CRD validation rules (``x-kubernetes-validations``), offline.

When a CRD is created or updated, kube-apiserver estimates the worst-case cost of every CEL
rule from the schema alone and refuses the CRD when one rule, times the number of times it can
run, passes 10,000,000, or all rules together pass 100,000,000. No API server runs on these
machines, so this module computes the same estimate for the CEL this project writes, from the
upstream sources (tag ``kubernetes-1.36.3`` of kubernetes/apiextensions-apiserver and
kubernetes/apiserver, google/cel-go ``v0.26.0``, which Kubernetes 1.36 pins):

* limits and the cardinality a rule's cost is multiplied by:
  apiextensions-apiserver ``pkg/apis/apiextensions/validation/validation.go``
  (``StaticEstimatedCostLimit``, ``StaticEstimatedCRDCostLimit``, ``getExpressionCost``,
  ``getCostErrorMessage``) and ``cel_validation.go`` (``extractMaxElements``), fallback
  ``maxCardinality`` in ``pkg/apiserver/schema/cel/compilation.go``;
* the size of ``self`` and of each field: apiserver ``pkg/cel/common/schemas.go``
  (``estimateMaxStringLengthPerRequest``, ``estimateMaxArrayItemsFromMinSize``,
  ``estimateMaxAdditionalPropertiesFromMinSize``; map keys are the shared ``StringType`` of
  size 0);
* the cost of each expression: cel-go ``checker/cost.go`` (``functionCost``,
  ``costComprehension``, ``costSelect``, ``computeSize``) and the macro expansions of
  ``parser/macro.go``; ``has()`` costs 0 of its own (``PresenceTestHasCost(false)`` in
  apiserver ``pkg/cel/environment/base.go``).

Only the maximum of each (min, max) estimate matters and is kept; every sum and product
saturates at 2**64-1 as Go's ``uint64`` arithmetic does. The CEL this project's rules use is
covered: literals, identifiers, field selection, ``has``, indexing, ``!``/``&&``/``||``/``?:``,
comparisons, ``in``, ``+``, ``size``, ``matches``, ``startsWith``, ``endsWith``, ``contains``,
conversions, and the macros ``all``, ``exists``, ``exists_one``, ``map``, ``filter``. Anything
else raises :class:`Unsupported`, so a new construct is priced on purpose, not by accident.

:func:`runtime_cost` applies the same model to an actual object (sizes from its values, not
its schema): an upper bound of what cel-go's runtime cost tracker counts, used by the
test API server for the per-call limit of 1,000,000.
"""

from __future__ import annotations

import codecs
import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Final

import celpy
import lark

#: ``StaticEstimatedCostLimit``: one rule, times its cardinality.
PER_RULE_LIMIT: Final = 10_000_000
#: ``StaticEstimatedCRDCostLimit``: all rules of one schema together.
PER_CRD_LIMIT: Final = 100_000_000
#: ``PerCallLimit``: one evaluation at run time.
PER_CALL_LIMIT: Final = 1_000_000
#: ``RuntimeCELCostBudget``: every evaluation of one object's validation together.
RUNTIME_BUDGET: Final = 10_000_000
#: ``MaxRequestSizeBytes``: what unbounded sizes are estimated from.
MAX_REQUEST_BYTES: Final = 3 * 1024 * 1024
#: Go's ``math.MaxUint64``: an unknown size, and where costs saturate.
UNBOUNDED: Final = 2**64 - 1

_STRING_TRAVERSAL: Final = 0.1  # common.StringTraversalCostFactor
_REGEX_LENGTH: Final = 0.25  # common.RegexStringLengthCostFactor
_LIST_CREATE: Final = 10  # common.ListCreateBaseCost
_MAP_CREATE: Final = 30  # common.MapCreateBaseCost
#: Sizes of the formats whose maxLength is ignored (MaxDurationSizeJSON, JSONDateSize,
#: MaxDatetimeSizeJSON).
_FORMAT_SIZES: Final = {"duration": 32, "date": 12, "date-time": 32}
_SCALAR_TYPES: Final = {"bool", "int", "uint", "double", "duration", "timestamp"}
_CONVERSIONS: Final = {"int", "uint", "double", "string", "bytes", "duration", "timestamp", "dyn"}


class Unsupported(ValueError):
    """A construct this estimator does not price (name it in the module to support it)."""


def add(*costs: int) -> int:
    return min(sum(costs), UNBOUNDED)


def mul(a: int, b: int) -> int:
    return 0 if a == 0 else min(a * b, UNBOUNDED)


def factor(x: int, f: float) -> int:
    """cel-go's ``multiplyByCostFactor``: ``ceil(x * f)``, saturating."""
    if x >= UNBOUNDED:
        return UNBOUNDED
    return min(math.ceil(float(x) * f), UNBOUNDED)


# ------------------------------------------------------------------------- schema sizes
def min_serialized_size(node: dict[str, Any]) -> int:
    """``MinSerializedSize`` of a schema node's declared type (bytes of its shortest JSON)."""
    kind = node.get("type")
    if node.get("x-kubernetes-int-or-string"):
        return 1
    if kind == "string":
        return {"duration": 3, "date": 12, "date-time": 21}.get(node.get("format", ""), 2)
    if kind == "boolean":
        return 4
    if kind in ("integer", "number"):
        return 1
    if kind == "array" or (kind == "object" and isinstance(node.get("additionalProperties"), dict)):
        return 2
    if kind == "object":
        required = set(node.get("required") or [])
        total = 2
        for name, child in (node.get("properties") or {}).items():
            if name in required and "default" not in child:
                total += len(name) + min_serialized_size(child) + 4
        return total
    return 1


def max_elements(node: dict[str, Any]) -> int:
    """``MaxElements`` of a node's declared type: the size the estimator gives it."""
    kind = node.get("type")
    if node.get("_map_key"):
        return int(node.get("_size", 0))
    if node.get("x-kubernetes-int-or-string"):
        return node["maxLength"] * 4 if "maxLength" in node else MAX_REQUEST_BYTES - 2
    if kind == "string":
        fmt = node.get("format", "")
        if fmt in _FORMAT_SIZES:
            return _FORMAT_SIZES[fmt]
        if fmt == "byte":
            return node.get("maxLength", MAX_REQUEST_BYTES - 2)
        if "maxLength" in node:
            return max(node["maxLength"], 0) * 4
        if node.get("enum"):
            return max(len(str(v).encode()) for v in node["enum"])
        return MAX_REQUEST_BYTES - 2
    if kind == "array":
        if "maxItems" in node:
            return max(node["maxItems"], 0)
        return (MAX_REQUEST_BYTES - 2) // (min_serialized_size(node["items"]) + 1)
    if kind == "object" and isinstance(node.get("additionalProperties"), dict):
        if "maxProperties" in node:
            return max(node["maxProperties"], 0)
        return (MAX_REQUEST_BYTES - 2) // (min_serialized_size(node["additionalProperties"]) + 6)
    return 0


def extract_max_elements(node: dict[str, Any]) -> int | None:
    """``extractMaxElements``: how many children a node can have (None: unbounded)."""
    kind = node.get("type")
    if kind == "object" and isinstance(node.get("additionalProperties"), dict):
        return max(node["maxProperties"], 0) if "maxProperties" in node else None
    if kind == "array":
        return max(node["maxItems"], 0) if "maxItems" in node else None
    return 1


def cel_type(node: dict[str, Any]) -> str:
    """The CEL type the API server declares for a schema node."""
    if node.get("_map_key"):
        return "string"
    if node.get("x-kubernetes-int-or-string") or node.get("x-kubernetes-preserve-unknown-fields"):
        return "dyn"
    kind = node.get("type")
    if kind == "string":
        return {"byte": "bytes", "duration": "duration", "date": "timestamp"}.get(
            node.get("format", ""), "timestamp" if node.get("format") == "date-time" else "string"
        )
    if kind == "object":
        return "map" if isinstance(node.get("additionalProperties"), dict) else "object"
    return {"boolean": "bool", "integer": "int", "number": "double", "array": "list"}.get(
        str(kind), "dyn"
    )


# ------------------------------------------------------------------------- the estimator
@dataclass
class _Value:
    """An expression's estimate: its cost, its size source and its type."""

    cost: int
    typ: str
    node: dict[str, Any] | None = None  # the schema node its path resolves to
    size: int | None = None  # a literal's or a computed result's own size

    def size_max(self) -> int:
        if self.size is not None:
            return self.size
        if self.node is not None:
            return max_elements(self.node)
        if self.typ in _SCALAR_TYPES:
            return 1
        return UNBOUNDED


@dataclass
class _Scope:
    variables: dict[str, _Value] = field(default_factory=dict)


class Estimator:
    """Estimates one rule on one schema node (``self``; ``oldSelf`` has the same sizes)."""

    def __init__(self, node: dict[str, Any]) -> None:
        self.node = node

    def cost(self, rule: str) -> int:
        """The rule's ``MaxCost`` (before cardinality). Raises :class:`Unsupported`."""
        tree = _parse(rule)
        root = _Value(0, cel_type(self.node), self.node)
        scope = _Scope({"self": root, "oldSelf": root})
        return self._expr(tree, scope).cost

    # The grammar is cel-python's (``celpy/cel.lark``): one method per rule of it.
    def _expr(self, t: Any, scope: _Scope) -> _Value:
        if isinstance(t, lark.Token):
            raise Unsupported(f"token {t!r}")
        handler = getattr(self, f"_r_{t.data}", None)
        if handler is None:
            raise Unsupported(f"CEL construct {t.data}")
        return handler(t, scope)  # type: ignore[no-any-return]

    def _only(self, t: Any, scope: _Scope) -> _Value:
        (child,) = [c for c in t.children if c is not None]
        return self._expr(child, scope)

    _r_member = _r_primary = _r_paren_expr = _only

    def _single_or(self, t: Any, scope: _Scope, combine: Any) -> _Value:
        children = [c for c in t.children if c is not None]
        if len(children) == 1:
            return self._expr(children[0], scope)
        return combine(children, scope)

    def _logical(self, children: list[Any], scope: _Scope) -> _Value:
        # &&, ||: the operands' costs, nothing of their own.
        parts = [self._expr(c, scope) for c in children]
        return _Value(add(*(p.cost for p in parts)), "bool")

    def _r_expr(self, t: Any, scope: _Scope) -> _Value:
        children = [c for c in t.children if c is not None]
        if len(children) == 1:
            return self._expr(children[0], scope)
        cond, then, other = (self._expr(c, scope) for c in children)
        best = then if then.cost >= other.cost else other
        size = max(then.size_max(), other.size_max())
        return _Value(add(cond.cost, best.cost), then.typ, None, size)

    def _r_conditionalor(self, t: Any, scope: _Scope) -> _Value:
        return self._single_or(t, scope, self._logical)

    _r_conditionaland = _r_conditionalor

    def _r_relation(self, t: Any, scope: _Scope) -> _Value:
        children = [c for c in t.children if c is not None]
        if len(children) == 1:
            return self._expr(children[0], scope)
        left_tree, right_tree = children
        op = left_tree.data  # relation_eq, relation_lt, relation_in...
        left = self._expr(left_tree.children[0], scope)
        right = self._expr(right_tree, scope)
        args = add(left.cost, right.cost)
        if op in ("relation_eq", "relation_ne") or (
            op in ("relation_lt", "relation_le", "relation_gt", "relation_ge")
            and (left.typ in ("string", "bytes") or right.typ in ("string", "bytes"))
        ):
            own = factor(min(left.size_max(), right.size_max()), _STRING_TRAVERSAL)
        elif op == "relation_in":
            own = right.size_max() if right.typ == "list" else 1
        else:
            own = 1
        return _Value(add(args, own), "bool")

    def _r_addition(self, t: Any, scope: _Scope) -> _Value:
        children = [c for c in t.children if c is not None]
        if len(children) == 1:
            return self._expr(children[0], scope)
        left_tree, right_tree = children
        left = self._expr(left_tree.children[0], scope)
        right = self._expr(right_tree, scope)
        args = add(left.cost, right.cost)
        if left_tree.data == "addition_add" and left.typ in ("string", "bytes"):
            size = add(left.size_max(), right.size_max())
            return _Value(add(args, factor(size, _STRING_TRAVERSAL)), left.typ, None, size)
        if left_tree.data == "addition_add" and left.typ == "list":
            return _Value(add(args, 1), "list", None, add(left.size_max(), right.size_max()))
        return _Value(add(args, 1), left.typ)

    def _r_multiplication(self, t: Any, scope: _Scope) -> _Value:
        children = [c for c in t.children if c is not None]
        if len(children) == 1:
            return self._expr(children[0], scope)
        left = self._expr(children[0].children[0], scope)
        right = self._expr(children[1], scope)
        return _Value(add(left.cost, right.cost, 1), left.typ)

    def _r_unary(self, t: Any, scope: _Scope) -> _Value:
        children = [c for c in t.children if c is not None]
        if len(children) == 1:
            return self._expr(children[0], scope)
        op, operand = children
        inner = self._expr(operand, scope)
        return _Value(add(inner.cost, 1), "bool" if op.data == "unary_not" else inner.typ)

    def _r_literal(self, t: Any, scope: _Scope) -> _Value:
        token = t.children[0]
        kind = token.type
        if kind in ("STRING_LIT", "MLSTRING_LIT", "BYTES_LIT"):
            text = _literal_text(str(token))
            typ = "bytes" if kind == "BYTES_LIT" else "string"
            return _Value(0, typ, None, len(text.encode()) if typ == "bytes" else len(text))
        typ = {"INT_LIT": "int", "UINT_LIT": "uint", "FLOAT_LIT": "double", "BOOL_LIT": "bool"}
        return _Value(0, typ.get(kind, "null"), None, 1)

    def _r_ident(self, t: Any, scope: _Scope) -> _Value:
        name = str(t.children[0])
        found = scope.variables.get(name)
        if found is None:
            raise Unsupported(f"identifier {name}")
        return _Value(1, found.typ, found.node, found.size)

    def _r_list_lit(self, t: Any, scope: _Scope) -> _Value:
        items = self._args(t, scope)
        return _Value(add(_LIST_CREATE, *(i.cost for i in items)), "list", None, len(items))

    def _r_map_lit(self, t: Any, scope: _Scope) -> _Value:
        inits = t.children[0].children if t.children and t.children[0] is not None else []
        parts = [self._expr(c, scope) for c in inits]
        return _Value(add(_MAP_CREATE, *(p.cost for p in parts)), "map", None, len(parts) // 2)

    def _args(self, t: Any, scope: _Scope) -> list[_Value]:
        lists = [c for c in t.children if isinstance(c, lark.Tree) and c.data == "exprlist"]
        return [self._expr(c, scope) for c in lists[0].children] if lists else []

    def _r_member_dot(self, t: Any, scope: _Scope) -> _Value:
        target_tree, name = t.children
        target = self._expr(target_tree, scope)
        return self._select(target, str(name))

    def _select(self, target: _Value, name: str) -> _Value:
        own = 1 if target.typ in ("object", "map") else 0
        node = target.node
        if node is not None and target.typ == "object":
            child = (node.get("properties") or {}).get(name)
            if child is None:
                raise Unsupported(f"no field {name}")
            return _Value(add(target.cost, own), cel_type(child), child)
        if node is not None and target.typ == "map":
            # Field-style access on a map: the path walk fails, only the type is known.
            values = node["additionalProperties"]
            return _Value(add(target.cost, own), cel_type(values))
        return _Value(add(target.cost, own), "dyn")

    def _r_member_index(self, t: Any, scope: _Scope) -> _Value:
        target_tree, key_tree = t.children
        target = self._expr(target_tree, scope)
        key = self._expr(key_tree, scope)
        node = target.node
        child: dict[str, Any] | None = None
        if node is not None and target.typ == "list":
            child = node["items"]
        elif node is not None and target.typ == "map":
            child = node["additionalProperties"]
        return _Value(add(target.cost, key.cost, 1), cel_type(child) if child else "dyn", child)

    def _r_ident_arg(self, t: Any, scope: _Scope) -> _Value:
        name = str(t.children[0])
        if name == "has":
            (arg,) = t.children[1].children
            select = _descend(arg, "member_dot")
            if select is None:
                raise Unsupported("has() of something other than a field")
            # The presence test costs its operand's target; has() adds 0 in Kubernetes.
            return _Value(self._expr(select.children[0], scope).cost, "bool")
        args = self._args(t, scope)
        return self._call(name, None, args)

    def _r_member_dot_arg(self, t: Any, scope: _Scope) -> _Value:
        target_tree, name_token = t.children[0], t.children[1]
        name = str(name_token)
        if name in ("all", "exists", "exists_one", "map", "filter"):
            return self._comprehension(name, target_tree, t.children[2], scope)
        target = self._expr(target_tree, scope)
        args = self._args(t, scope)
        return self._call(name, target, args)

    def _call(self, name: str, target: _Value | None, args: list[_Value]) -> _Value:
        values = ([target] if target is not None else []) + args
        paid = add(*(v.cost for v in values))
        if name == "size":
            return _Value(add(paid, 1), "int")
        if target is not None and name == "matches":
            own = mul(
                factor(add(target.size_max(), 1), _STRING_TRAVERSAL),
                factor(args[0].size_max(), _REGEX_LENGTH),
            )
            return _Value(add(paid, own), "bool")
        if target is not None and name in ("startsWith", "endsWith"):
            return _Value(add(paid, factor(args[0].size_max(), _STRING_TRAVERSAL)), "bool")
        if target is not None and name == "contains":
            own = mul(
                factor(target.size_max(), _STRING_TRAVERSAL),
                factor(args[0].size_max(), _STRING_TRAVERSAL),
            )
            return _Value(add(paid, own), "bool")
        if name in _CONVERSIONS or name == "matches":
            typ = "bool" if name == "matches" else name
            if name == "dyn":
                return _Value(add(paid, 1), args[0].typ, args[0].node, args[0].size)
            return _Value(add(paid, 1), typ)
        raise Unsupported(f"function {name}")

    def _comprehension(self, macro: str, range_tree: Any, args_tree: Any, scope: _Scope) -> _Value:
        iterated = self._expr(range_tree, scope)
        exprs = args_tree.children
        variable = str(_descend(exprs[0], "ident").children[0])  # type: ignore[union-attr]
        n = iterated.size_max()
        node = iterated.node
        if iterated.typ == "list":
            element = _Value(
                0, cel_type(node["items"]) if node else "dyn", node["items"] if node else None
            )
        elif iterated.typ == "map":
            # A key's estimated size is 0 (the shared StringType); at run time, its length.
            size = int((node or {}).get("_key_size", 0))
            element = _Value(0, "string", {"type": "string", "_map_key": True, "_size": size})
        else:
            element = _Value(0, "dyn")
        inner = _Scope({**scope.variables, variable: element})
        bodies = [self._expr(e, inner).cost for e in exprs[1:]]
        r = iterated.cost
        if macro == "all":
            cost = add(r, 1, mul(n, add(bodies[0], 3)))
            return _Value(cost, "bool")
        if macro == "exists":
            return _Value(add(r, 1, mul(n, add(bodies[0], 4))), "bool")
        if macro == "exists_one":
            return _Value(add(r, 2, mul(n, add(bodies[0], 2))), "bool")
        if macro == "map":
            return _Value(add(r, 11, mul(n, add(*bodies, 12))), "list", None, n)
        return _Value(add(r, 11, mul(n, add(bodies[0], 13))), "list", None, n)  # filter


def _descend(t: Any, data: str) -> Any:
    """The first subtree named ``data`` along single-child chains from ``t``."""
    while isinstance(t, lark.Tree):
        if t.data == data:
            return t
        children = [c for c in t.children if c is not None]
        if len(children) != 1:
            return None
        t = children[0]
    return None


def _literal_text(token: str) -> str:
    raw = token[:1] in "rR" or (token[1:2] in "rR" and token[:1] in "bB")
    body = token.lstrip("bBrR")
    quote = body[:3] if body[:3] in ('"""', "'''") else body[:1]
    body = body[len(quote) : -len(quote)]
    return body if raw else codecs.decode(body, "unicode_escape")


@lru_cache(maxsize=1024)
def _parse(rule: str) -> Any:
    return celpy.Environment().compile(rule)


# ------------------------------------------------------------------------- a whole CRD
@dataclass(frozen=True)
class RuleCost:
    """One rule's place, its cost per evaluation and times the cardinality of its node."""

    path: str
    rule: str
    cost: int
    cardinality: int
    total: int


def rule_costs(schema: dict[str, Any]) -> list[RuleCost]:
    """Every rule of an ``openAPIV3Schema`` with its estimated cost, as the API server
    computes it when the CRD is applied."""
    out: list[RuleCost] = []

    def visit(node: dict[str, Any], path: str, cardinality: int | None) -> None:
        for entry in node.get("x-kubernetes-validations") or []:
            cost = Estimator(node).cost(entry["rule"])
            card = (
                cardinality
                if cardinality is not None
                else MAX_REQUEST_BYTES // (min_serialized_size(node) + 1)
            )
            out.append(RuleCost(path or "<root>", entry["rule"], cost, card, mul(cost, card)))
        below = extract_max_elements(node)
        child_card = None if cardinality is None or below is None else mul(cardinality, below)
        for name, child in (node.get("properties") or {}).items():
            visit(child, f"{path}.{name}", child_card)
        if isinstance(node.get("items"), dict):
            visit(node["items"], f"{path}[]", child_card)
        if isinstance(node.get("additionalProperties"), dict):
            visit(node["additionalProperties"], f"{path}{{}}", child_card)

    visit(with_root_metadata(schema), "", 1)
    return out


def with_root_metadata(schema: dict[str, Any]) -> dict[str, Any]:
    """The root as rules see it: ``metadata.name`` and ``metadata.generateName`` are declared
    (plain strings: unbounded up to Kubernetes 1.36, as the API server at that tag does)."""
    meta = dict((schema.get("properties") or {}).get("metadata") or {"type": "object"})
    meta["properties"] = {"name": {"type": "string"}, "generateName": {"type": "string"}}
    return {**schema, "properties": {**(schema.get("properties") or {}), "metadata": meta}}


def cost_error(name: str, cost: int, limit: int) -> str:
    """``getCostErrorMessage``: the API server's words for a cost over ``limit``."""
    f = cost / limit
    amount = "more than 100x" if f > 100 else (f"{f:f}x" if f < 1.5 else f"{f:.1f}x")
    return (
        f"{name} exceeds budget by factor of {amount} (try simplifying the rule, or adding "
        "maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"
    )


def crd_cost_errors(schema: dict[str, Any]) -> list[str]:
    """What the API server answers about the rules' cost when the CRD is applied (empty: it
    is accepted): one error per rule over :data:`PER_RULE_LIMIT`, and the total's over
    :data:`PER_CRD_LIMIT`."""
    costs = rule_costs(schema)
    errors = [
        f"{c.path}: {c.rule}: " + cost_error("estimated rule cost", c.total, PER_RULE_LIMIT)
        for c in costs
        if c.total > PER_RULE_LIMIT
    ]
    total = add(*(c.total for c in costs))
    if total > PER_CRD_LIMIT:
        errors.append(
            cost_error(
                "x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema",
                total,
                PER_CRD_LIMIT,
            )
        )
    return errors


# ------------------------------------------------------------------------- run time
def actual_schema(node: dict[str, Any], value: Any) -> dict[str, Any]:
    """``node`` with its bounds replaced by the sizes ``value`` actually has, so that the
    static model prices one evaluation on ``value`` (strings by characters, as cel-go's
    runtime counts them; lists and maps by entries)."""
    out = dict(node)
    if isinstance(value, str) and node.get("type") == "string" and not node.get("format"):
        out.pop("enum", None)
        out["maxLength"] = math.ceil(len(value) / 4)
    elif isinstance(value, list) and isinstance(node.get("items"), dict):
        out["maxItems"] = len(value)
        out["items"] = _largest(node["items"], value)
    elif isinstance(value, dict) and isinstance(node.get("additionalProperties"), dict):
        out["maxProperties"] = len(value)
        out["_key_size"] = max((len(k) for k in value), default=0)
        out["additionalProperties"] = _largest(node["additionalProperties"], list(value.values()))
    elif isinstance(value, dict) and "properties" in node:
        out["properties"] = {
            k: actual_schema(child, value[k]) if k in value else child
            for k, child in node["properties"].items()
        }
    return out


def _largest(node: dict[str, Any], values: list[Any]) -> dict[str, Any]:
    # One element node prices every element: it takes the largest size of each.
    merged: dict[str, Any] | None = None
    for value in values:
        merged = _max_of(merged, actual_schema(node, value))
    return merged if merged is not None else node


def _max_of(a: dict[str, Any] | None, b: dict[str, Any]) -> dict[str, Any]:
    if a is None:
        return b
    out = dict(a)
    for key in ("maxLength", "maxItems", "maxProperties"):
        if key in b:
            out[key] = max(a.get(key, 0), b[key])
    for key in ("items", "additionalProperties"):
        if isinstance(b.get(key), dict):
            out[key] = _max_of(a.get(key) if isinstance(a.get(key), dict) else None, b[key])
    if "properties" in b:
        out["properties"] = {
            k: _max_of((a.get("properties") or {}).get(k), child)
            for k, child in b["properties"].items()
        }
    return out


def runtime_cost(node: dict[str, Any], rule: str, value: Any) -> int:
    """An upper bound of the cost cel-go counts evaluating ``rule`` once on ``value``."""
    return Estimator(actual_schema(node, value)).cost(rule)
