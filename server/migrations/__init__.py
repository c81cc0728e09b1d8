"""Alembic migrations of the server's database; run by the server at start (storage.upgrade)."""
