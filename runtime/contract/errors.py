"""Errors raised by the sparkglass runtime.

Every error names what is wrong (the vertex, the field) and, where there is one, the
allowed range, so that a user can fix the pipeline without reading our code.
"""

from __future__ import annotations


class SparkglassError(Exception):
    """Base class of every error sparkglass raises on purpose."""


class InvalidParameterError(SparkglassError, ValueError):
    """A request parameter or setting is malformed or out of range.

    ``field`` is the offending name as the caller wrote it (``maxRecords``,
    ``spark.sparkglass.sampling.timeout``); the message names it and the allowed range.
    """

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field


class SamplingSettingsError(InvalidParameterError):
    """A sampling setting or duration is malformed or out of range; ``field`` names it."""


class PipelineError(SparkglassError):
    """The pipeline graph is malformed.

    Raised for a bad vertex name (not a DNS-1123 label), a duplicate name, an input that
    names no vertex, or a cycle. ``vertex`` is the offending vertex's name.
    """

    def __init__(self, message: str, *, vertex: str | None = None) -> None:
        super().__init__(message)
        self.vertex = vertex


class PlanError(SparkglassError):
    """The declared attributes cannot hold for this graph (raised by the planner).

    ``vertex`` is the vertex whose attribute is violated; ``source`` the source that makes
    it impossible, when there is one.
    """

    def __init__(
        self, message: str, *, vertex: str | None = None, source: str | None = None
    ) -> None:
        super().__init__(message)
        self.vertex = vertex
        self.source = source


#: What to do when no usable Java is found (Spark and ``javac`` need 17+).
JAVA_FIX = (
    "install a Java 17+ JDK, which has the `javac` that builds the sampling jar on first use "
    "(Debian/Ubuntu: `apt-get install openjdk-17-jdk-headless`), or set JAVA_HOME to one"
)


class JavaNotFoundError(SparkglassError):
    """No usable Java runtime: Spark cannot start (the message ends with :data:`JAVA_FIX`)."""
