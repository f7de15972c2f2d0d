"""Round execution: :class:`RoundExecutor` with a local (driver HTTP) and a Kubernetes
(``DataSample`` resource) implementation."""

from .base import RoundExecutor, RoundOutcome, RoundRefused, RoundRequest

__all__ = ["RoundExecutor", "RoundOutcome", "RoundRefused", "RoundRequest"]
