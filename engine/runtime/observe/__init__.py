"""Observability: Prometheus metrics, structured logs, garbage-collector pauses."""
