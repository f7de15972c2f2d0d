"""The operator's DataSample admission webhook as the API server calls it: a certificate and
port for it (``webhook_tls``), the operator's arguments to serve it (``operator_args``), a
client posting AdmissionReviews (``webhook``, :class:`Webhook`) and the verdict readers
``allowed`` and ``denied``.

The definitions still live in ``tests/operator/test_admission.py`` (being changed elsewhere
at the time of the move) and are re-exported from here; they are to move into this module,
with that test module importing them from here (``tests/test_layout.py``).
"""

from __future__ import annotations

from tests.operator.test_admission import (  # the definitions, until they move here
    Webhook,
    WebhookTLS,
    allowed,
    denied,
    operator_args,
    webhook,
    webhook_tls,
)

__all__ = [
    "Webhook",
    "WebhookTLS",
    "allowed",
    "denied",
    "operator_args",
    "webhook",
    "webhook_tls",
]
