"""Verification backend: a real torch decoder that runs each workload and counts what it executes."""
