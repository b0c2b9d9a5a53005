"""The one costing rule: a matrix product ``[n, a] x [a, b]`` has n*b outputs of
a multiply-adds each, and one multiply-add is 2 FLOPs."""
from __future__ import annotations

import sympy as sp

FLOPS_PER_MULTIPLY_ADD = 2


def matmul(n: sp.Expr, a: sp.Expr, b: sp.Expr) -> sp.Expr:
    """FLOPs of ``[n, a] x [a, b]``."""
    return FLOPS_PER_MULTIPLY_ADD * n * a * b
