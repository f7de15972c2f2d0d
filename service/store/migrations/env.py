"""Alembic environment: runs on the connection :func:`sparkglass.service.store.db.migrate` passes.

Run from code only (``config.attributes["connection"]``); there is no alembic.ini, because
the migrations ship inside the package and apply themselves on service start.
"""

from __future__ import annotations

from alembic import context

from sparkglass.service.store.orm import Base

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=connection.dialect.name == "sqlite",
    # SQLite's DDL is transactional; store.db.migrate opens the transaction itself there, so
    # a failed migration leaves no table behind (Alembic assumes otherwise for SQLite).
    transactional_ddl=True,
)
with context.begin_transaction():
    context.run_migrations()
