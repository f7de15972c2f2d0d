"""sparkglass: a window into running PySpark pipelines on Kubernetes.

Subpackages: :mod:`sparkglass.runtime` (the in-job library), :mod:`sparkglass.service`
(REST service and web page), :mod:`sparkglass.operator` (the kopf operator).
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("sparkglass")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0"

__all__ = ["__version__"]
