"""Alembic's entry point for xover's migrations, run programmatically by `Store` (session.py) on the
connection it opened; there is no alembic.ini."""

from alembic import context

from xover.store.models import Base

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True, compare_type=False)
with context.begin_transaction():
    context.run_migrations()
