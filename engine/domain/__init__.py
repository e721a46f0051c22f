"""Pure scheduling logic: no Kafka, no RocksDB, no clock. Time is always an argument."""
