"""The driver control endpoint and its one client.

- :mod:`.endpoint`: the HTTP server in the Spark driver (starts rounds, serves results,
  the pipeline and the sampling settings; bearer token).
- :mod:`.client`: :class:`~.client.ControlClient` (sync) and
  :class:`~.client.AsyncControlClient` (async), used by the service, the operator and the
  CLI; Spark-free, so ``sparkglass.runtime.control.client`` is importable without pyspark
  (this ``__init__`` imports nothing on purpose).
"""
