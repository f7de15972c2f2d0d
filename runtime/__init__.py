"""The in-job library a PySpark job imports.

``Pipeline`` is the DSL; ``spark_session`` creates a session with sparkglass defaults. The
sub-packages (``contract``, ``control``, ``sampling``, ``optimizations``, ``async_ops``) are
mapped in docs/architecture.md, "runtime".

The names below are imported on first use (PEP 562), so that ``import
sparkglass.runtime.contract`` (what the service and the operator do) never imports pyspark.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sparkglass.runtime.async_ops.async_sink import (
        AsyncSinkWriter,
        InitContext,
        write_partitions,
    )
    from sparkglass.runtime.async_ops.async_vertex import AsyncFunction, async_map
    from sparkglass.runtime.async_ops.errors import (
        AsyncConfigError,
        AsyncRequestError,
        AsyncTimeoutError,
    )
    from sparkglass.runtime.async_ops.retry import (
        NO_RETRY,
        ExponentialBackoffRetry,
        FixedDelayRetry,
    )
    from sparkglass.runtime.contract.attributes import (
        idempotent,
        no_output_until_end_of_input,
        not_cache_record,
    )
    from sparkglass.runtime.contract.description import (
        PipelineDescription,
        VertexAttributes,
        VertexDescription,
        VertexKind,
    )
    from sparkglass.runtime.contract.errors import (
        JavaNotFoundError,
        PipelineError,
        PlanError,
        SparkglassError,
    )
    from sparkglass.runtime.contract.expectations import (
        Expectation,
        expect,
        expect_or_drop,
        expect_or_fail,
    )
    from sparkglass.runtime.contract.plan import Optimizations, Plan
    from sparkglass.runtime.contract.planner import plan
    from sparkglass.runtime.pipeline import Pipeline, PipelineProgress
    from sparkglass.runtime.sampling.attach import attach
    from sparkglass.runtime.session import spark_session

#: Public name → the module that defines it.
_EXPORTS: dict[str, str] = {
    "AsyncSinkWriter": "async_ops.async_sink",
    "InitContext": "async_ops.async_sink",
    "write_partitions": "async_ops.async_sink",
    "AsyncFunction": "async_ops.async_vertex",
    "async_map": "async_ops.async_vertex",
    "AsyncConfigError": "async_ops.errors",
    "AsyncRequestError": "async_ops.errors",
    "AsyncTimeoutError": "async_ops.errors",
    "NO_RETRY": "async_ops.retry",
    "ExponentialBackoffRetry": "async_ops.retry",
    "FixedDelayRetry": "async_ops.retry",
    "idempotent": "contract.attributes",
    "no_output_until_end_of_input": "contract.attributes",
    "not_cache_record": "contract.attributes",
    "Expectation": "contract.expectations",
    "expect": "contract.expectations",
    "expect_or_drop": "contract.expectations",
    "expect_or_fail": "contract.expectations",
    "PipelineDescription": "contract.description",
    "VertexAttributes": "contract.description",
    "VertexDescription": "contract.description",
    "VertexKind": "contract.description",
    "JavaNotFoundError": "contract.errors",
    "PipelineError": "contract.errors",
    "PlanError": "contract.errors",
    "SparkglassError": "contract.errors",
    "Optimizations": "contract.plan",
    "Plan": "contract.plan",
    "plan": "contract.planner",
    "Pipeline": "pipeline",
    "PipelineProgress": "pipeline",
    "spark_session": "session",
    "attach": "sampling.attach",
}

__all__ = [
    "NO_RETRY",
    "AsyncConfigError",
    "AsyncFunction",
    "AsyncRequestError",
    "AsyncSinkWriter",
    "AsyncTimeoutError",
    "Expectation",
    "ExponentialBackoffRetry",
    "FixedDelayRetry",
    "InitContext",
    "JavaNotFoundError",
    "Optimizations",
    "Pipeline",
    "PipelineDescription",
    "PipelineError",
    "PipelineProgress",
    "Plan",
    "PlanError",
    "SparkglassError",
    "VertexAttributes",
    "VertexDescription",
    "VertexKind",
    "async_map",
    "attach",
    "expect",
    "expect_or_drop",
    "expect_or_fail",
    "idempotent",
    "no_output_until_end_of_input",
    "not_cache_record",
    "plan",
    "spark_session",
    "write_partitions",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
