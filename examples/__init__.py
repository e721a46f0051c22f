"""Example handlers and the demo."""
