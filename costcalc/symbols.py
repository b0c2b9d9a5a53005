"""Every symbol of the cost model, made once from ``costcalc.vocab`` with its assumptions.

Sizes (model, derived and workload names of the vocabulary) are positive integers; the
summation indices are declared here too, so no module makes a symbol of its own.
"""
from __future__ import annotations

import sympy as sp

from . import vocab

BY_NAME: dict[str, sp.Symbol] = {n.name: sp.Symbol(n.name, integer=True, positive=True)
                                 for n in vocab.MODEL + vocab.DERIVED + vocab.WORKLOAD}
globals().update(BY_NAME)   # s.L, s.d, s.h_q, ... s.B, s.S, s.T, s.C, s.N, s.b_q, s.b_k

# Summation indices and solver unknowns (not sizes: they run from 0 or 1).
i = sp.Symbol("i", integer=True, nonnegative=True)       # a sequence of a batch
j = sp.Symbol("j", integer=True, nonnegative=True)       # a decode step or a chunk
# The query-tile index carries no integer assumption on purpose: sympy 1.14 wrongly takes
# Min(4, 2*t + 2)/6 for an integer when t is one, and then drops the ceiling around it.
t = sp.Symbol("t", nonnegative=True)                     # a query tile
p = sp.Symbol("p", integer=True, positive=True)          # a query's position (1-based, cache included)
K = sp.Symbol("K", integer=True, positive=True)          # keys a decode step reads
n_chunks = sp.Symbol("n", integer=True, positive=True)   # chunks in a uniform schedule
S_i = sp.IndexedBase("S", integer=True, positive=True)[i]  # length of sequence i of a batch

# Display-only symbol for the executed linear parameters per token.
P_lin = sp.Symbol("P_lin", integer=True, positive=True)
