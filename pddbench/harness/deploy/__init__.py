"""Bringing a scenario's systems up and down (processes, namespaces, health, teardown)."""
