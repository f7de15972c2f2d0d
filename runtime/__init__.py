"""The in-job library a PySpark job imports (DESIGN.md: ``runtime/``).

``Pipeline`` is the DSL; ``spark_session`` creates a session with sparkglass defaults.
"""

from .async_errors import AsyncConfigError, AsyncRequestError, AsyncTimeoutError
from .async_sink import AsyncSinkWriter, InitContext, write_partitions
from .async_vertex import AsyncFunction, async_map
from .attributes import idempotent, no_output_until_end_of_input, not_cache_record
from .description import PipelineDescription, VertexAttributes, VertexDescription, VertexKind
from .errors import JavaNotFoundError, PipelineError, PlanError, SparkglassError
from .pipeline import Pipeline, PipelineProgress
from .plan import Optimizations, Plan
from .planner import plan
from .retry import NO_RETRY, ExponentialBackoffRetry, FixedDelayRetry
from .session import spark_session

__all__ = [
    "NO_RETRY",
    "AsyncConfigError",
    "AsyncFunction",
    "AsyncRequestError",
    "AsyncSinkWriter",
    "AsyncTimeoutError",
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
    "idempotent",
    "no_output_until_end_of_input",
    "not_cache_record",
    "plan",
    "spark_session",
    "write_partitions",
]
