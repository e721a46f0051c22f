"""The ``epochq`` command: parses, calls, prints. No logic of its own."""
