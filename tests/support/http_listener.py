"""A plain-HTTP listener on 127.0.0.1 recording every request it gets (``listener``,
:class:`Listener`): where a test points what must never be called, or must not carry a
secret.

The definitions still live in ``tests/security/test_operator_trust.py`` (being changed
elsewhere at the time of the move) and are re-exported from here; they are to move into this
module, with that test module importing them from here (``tests/test_layout.py``).
"""

from __future__ import annotations

from tests.security.test_operator_trust import (  # the definitions, until they move here
    Listener,
    listener,
)

__all__ = [
    "Listener",
    "listener",
]
