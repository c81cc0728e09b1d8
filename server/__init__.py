"""perfctl's server: gRPC services, storage (SQLAlchemy + Alembic), job dispatch, metrics.

Built by the fleet issue; the measurement core (agent/) and the CLI do not depend on it.
"""
