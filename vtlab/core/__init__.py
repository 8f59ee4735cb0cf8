"""Foundations every layer may use: errors, atomic writes, file integrity, the cache, the hub, logs, paths."""
