"""Every symbol of the cost model, declared once, with its assumptions.

One vocabulary runs through the project: the symbol's name here is the key in a
preset file (model symbols) or the row column / CLI option of a workload input
(workload symbols). The names and meanings live in ``costcalc.vocab`` (no sympy).
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from . import vocab


def _size(name: str) -> sp.Symbol:
    return sp.Symbol(name, integer=True, positive=True)


# Model shape (keys of a preset file).
L = _size("L")          # decoder layers
d = _size("d")          # model width
h_q = _size("h_q")      # query heads
h_kv = _size("h_kv")    # key/value heads
d_h = _size("d_h")      # head dim
m = _size("m")          # dense SwiGLU width
E = _size("E")          # routed experts
k = _size("k")          # experts per token
m_e = _size("m_e")      # expert width
V = _size("V")          # vocabulary
W = _size("W")          # sliding window (keys a query reads at most)
E_s = _size("E_s")      # shared experts
m_s = _size("m_s")      # shared expert width
r_q = _size("r_q")      # MLA query LoRA rank
r_kv = _size("r_kv")    # MLA KV latent rank
d_nope = _size("d_nope")  # MLA per-head q/k dim without RoPE
d_rope = _size("d_rope")  # MLA per-head RoPE dim
d_v = _size("d_v")      # MLA per-head value dim

# Derived widths. They are symbols of their own so that formulas read as in the
# cost model; their values always come from h_q*d_h and h_kv*d_h (see ``derived_values``).
d_q = _size("d_q")
d_kv = _size("d_kv")

# Workload sizes.
B = _size("B")          # sequences in the batch
S = _size("S")          # prompt length
T = _size("T")          # tokens already in the KV cache
C = _size("C")          # new tokens in a chunk
N = _size("N")          # output tokens of a generation

# Attention kernel tile (the ``tiled`` convention): queries x keys per block.
b_q = _size("b_q")
b_k = _size("b_k")

# Summation indices (not sizes: they run from 0 or 1).
i = sp.Symbol("i", integer=True, nonnegative=True)
j = sp.Symbol("j", integer=True, nonnegative=True)
# The query-tile index carries no integer assumption on purpose: sympy 1.14 wrongly takes
# Min(4, 2*t + 2)/6 for an integer when t is one, and then drops the ceiling around it.
t = sp.Symbol("t", nonnegative=True)                 # query tile
p = sp.Symbol("p", integer=True, positive=True)      # a query's position (1-based, cache included)

# Display-only symbol for the executed linear parameters per token.
P_lin = sp.Symbol("P_lin", integer=True, positive=True)


@dataclass(frozen=True)
class Variable:
    symbol: sp.Symbol
    key: str            # preset key (model) or row column / CLI option stem (workload)
    meaning: str
    hf_field: str = ""  # usual HF config.json field, for model symbols


def _variables(names: tuple[vocab.Name, ...]) -> tuple[Variable, ...]:
    table = globals()
    return tuple(Variable(table[n.name], n.key, n.meaning, n.hf_field) for n in names)


MODEL = _variables(vocab.MODEL)
DERIVED = _variables(vocab.DERIVED)
WORKLOAD = _variables(vocab.WORKLOAD)

BY_NAME = {v.symbol.name: v.symbol for v in MODEL + DERIVED + WORKLOAD}


def derived_values(model: dict[sp.Symbol, int]) -> dict[sp.Symbol, int]:
    """The derived widths d_q and d_kv from a model's head counts."""
    by_name = vocab.derived({sym.name: value for sym, value in model.items()})
    return {BY_NAME[name]: value for name, value in by_name.items()}
