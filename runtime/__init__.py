"""The in-job library a PySpark job imports (DESIGN.md: ``runtime/``).

``Pipeline`` is the DSL; ``spark_session`` creates a session with sparkglass defaults.
"""

from .description import PipelineDescription, VertexAttributes, VertexDescription, VertexKind
from .errors import JavaNotFoundError, PipelineError, PlanError, SparkglassError
from .pipeline import Pipeline, PipelineProgress
from .session import spark_session

__all__ = [
    "JavaNotFoundError",
    "Pipeline",
    "PipelineDescription",
    "PipelineError",
    "PipelineProgress",
    "PlanError",
    "SparkglassError",
    "VertexAttributes",
    "VertexDescription",
    "VertexKind",
    "spark_session",
]
