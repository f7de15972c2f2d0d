"""The REST service and web page (docs/architecture.md, "Components").

Layout (FastAPI "bigger applications"): :mod:`.settings`, every knob, from ``SPARKGLASS_*``
environment variables; :mod:`.app`, ``create_app(settings)``, the ASGI app; :mod:`.local`,
``start_local_service`` (what ``sparkglass demo`` runs); :mod:`.client`, ``ServiceClient``;
:mod:`.routers`: applications, data samples + rounds, audit, operations (health, metrics);
:mod:`.dependencies`: state, store sessions, authentication and permission checks;
:mod:`.auth`: the ``local`` and ``kubernetes`` modes; :mod:`.shared_rounds`: lazy trigger +
polling and the shared-round rule (a database lease); :mod:`.execution`: a round through the
driver endpoint (local) or a ``DataSample`` (Kubernetes); :mod:`.store`: SQLAlchemy tables,
Alembic migrations, repository (``save_round`` for the operator); :mod:`.catalog`,
:mod:`.graph`: applications and their planned graphs; :mod:`.audit`, :mod:`.retention`,
:mod:`.metrics`; ``static/``: the Data Sample page.
"""
