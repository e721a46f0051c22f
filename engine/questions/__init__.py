"""Every question asked of a store or of the log: the read side, in one place (docs/architecture.md, *Questions*).

A module per kind of answer — jobs, deadletters, history, audit, lateness, recent, holdups,
limits, schedules, workers, tenants, view_status … — asked by the CLI, the client and the
console alike. A question reads a view's stores (read-only) or the log; it never imports the
owner's loop or executor, and they never import it (import-linter, ``pyproject.toml``).
This package imports nothing on its own: import the module that answers.
"""
