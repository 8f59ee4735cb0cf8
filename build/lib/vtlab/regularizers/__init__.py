"""Sparsity regularizers on SPLADE representations, each with its own λ and quadratic warm-up schedule."""

from vtlab.regularizers.base import Regularizer, gather_with_grad
from vtlab.regularizers.flops import Flops
from vtlab.regularizers.l1 import L1

__all__ = ["Regularizer", "gather_with_grad", "Flops", "L1"]
