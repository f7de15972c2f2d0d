"""The service store: SQLAlchemy 2 tables, Alembic migrations and the repository functions.

Save a finished round (what the operator does, ``sparkglass.operator.results``)::

    from sparkglass.service.store import open_store, save_round
    from sparkglass.service.store.repository import round_of_datasample
    sessions = open_store("postgresql+psycopg://sparkglass@db/sparkglass")
    with sessions.begin() as session:
        bound = round_of_datasample(session, uid)        # the DataSample's metadata.uid
        round_id = save_round(session, namespace="team-a", application="flights",
                              vertex="parse", result=result,          # a DataSampleResult
                              round_id=bound.id if bound else uid,
                              external_ref=datasample_name)
"""

from .db import make_engine, migrate, open_store
from .repository import (
    AuditRecord,
    PurgeCounts,
    TokenInfo,
    add_audit_events,
    add_token,
    bind_datasample,
    claim_round,
    count_rounds,
    create_round,
    delete_application,
    find_token,
    finished_result,
    get_application,
    get_round,
    issue_token,
    latest_finished_round,
    list_applications,
    list_audit_events,
    list_rounds,
    list_tokens,
    load_result,
    lookup_token,
    now_ms,
    purge_older_than,
    revoke_token,
    running_round,
    save_round,
    upsert_application,
)

__all__ = [
    "AuditRecord",
    "PurgeCounts",
    "TokenInfo",
    "add_audit_events",
    "add_token",
    "bind_datasample",
    "claim_round",
    "count_rounds",
    "create_round",
    "delete_application",
    "find_token",
    "finished_result",
    "get_application",
    "get_round",
    "issue_token",
    "latest_finished_round",
    "list_applications",
    "list_audit_events",
    "list_rounds",
    "list_tokens",
    "load_result",
    "lookup_token",
    "make_engine",
    "migrate",
    "now_ms",
    "open_store",
    "purge_older_than",
    "revoke_token",
    "running_round",
    "save_round",
    "upsert_application",
]
