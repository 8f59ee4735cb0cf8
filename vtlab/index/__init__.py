"""Sparse retrieval indexes."""
from vtlab.index.inverted import InvertedIndex, to_run, topk_rows

__all__ = ["InvertedIndex", "to_run", "topk_rows"]
