"""Projections: RocksDB state folded from ``<ns>.events``, rebuildable from the log at any time."""
