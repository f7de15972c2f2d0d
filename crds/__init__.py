"""The custom resources as typed code: ``SparkApplication`` and ``DataSample`` (sparkglass.io).

The models here are the one source of the resources' schema: ``make crds`` generates
``crds/*.yaml``, the chart's copy and the field reference from them, and the operator, the
admission webhook and the service parse stored objects with them.
"""
