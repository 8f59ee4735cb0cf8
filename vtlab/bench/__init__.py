"""Benchmarks (`make bench`): measured in their own processes, never asserted in unit tests."""
