"""Alembic migrations of the service store, shipped inside the package (applied on start)."""
