"""SQL written once for every relational backend (see :mod:`.dialect`).

Shared modules write ``?`` placeholders and portable SQL (``ON CONFLICT``, ``RETURNING``,
aliased subqueries); a backend's :class:`~docgraph.store.sql.dialect.Dialect` turns a
statement into its driver's form. What genuinely differs (bulk loads, vector columns, full
text) stays in the backend's folder as a small hook.
"""
