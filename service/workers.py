"""The service in several worker processes (``sparkglass serve --workers N``).

Each uvicorn worker is its own process with its own event loop, GIL, result cache and
thread pools, so polls are served by N cores. What must agree between workers lives in the
store: the shared-round rule (one round per vertex per refresh interval, the
``vertex_leases`` table), stored results, tokens and the audit log. What each worker keeps
for itself is bounded per process: ``result_cache_bytes`` each, so N workers may hold N times
that budget.

uvicorn starts workers from an import string, not from an application object: each builds
its application with :func:`app_from_environment` from ``SPARKGLASS_*`` variables, the same
settings ``sparkglass serve`` validated in the parent before it started them.
"""

from __future__ import annotations

import os

from fastapi import FastAPI

#: uvicorn's import string of :func:`app_from_environment` (with ``factory=True``).
FACTORY = "sparkglass.service.workers:app_from_environment"
#: The page token ``sparkglass serve`` printed, handed to every worker (local mode only,
#: when no ``--tokens-file`` is given); never stored.
EPHEMERAL_TOKEN_VARIABLE = "SPARKGLASS_SERVICE_TOKEN"


def app_from_environment() -> FastAPI:
    """The service application of one worker, from ``SPARKGLASS_*`` settings.

    Raises ``pydantic.ValidationError`` for invalid settings (the parent has checked the
    same variables before starting the workers)."""
    from .app import create_app
    from .auth.local import LocalAuthenticator
    from .malloc_tuning import tune_malloc
    from .settings import Settings

    tune_malloc()
    settings = Settings()
    app = create_app(settings)
    authenticator = app.state.sparkglass.authenticator
    token = os.environ.get(EPHEMERAL_TOKEN_VARIABLE)
    if token and isinstance(authenticator, LocalAuthenticator) and settings.tokens_file is None:
        authenticator.add_ephemeral_token(token, "local-admin", "admin")
    return app
