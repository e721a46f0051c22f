"""I/O: the Kafka adapter, the per-partition owner, the executor, timers, the process."""
