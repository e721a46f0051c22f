"""Remote workers: attempts dispatched to a pool, run in processes of their own (docs/workers.md).

``dispatch`` is the record a worker reads (staged in the transaction of its ``JobStarted``), ``leases``
the owner's table of attempts out with workers and when each lapses, ``pools`` what the owners know of
the workers (their heartbeats on ``<ns>.workers``), ``worker`` the Python worker process itself.
"""
