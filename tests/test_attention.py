"""core/attention.py: one rule, ``keys_read``, and the sums of it (a forward, decode steps, the
keys a kernel loads), checked position by position; the share of a prefill's rectangle each
convention computes."""
from dataclasses import replace
from fractions import Fraction

import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from costcalc import calc
from costcalc import symbols as s
from costcalc.blocks import coerce
from costcalc.core import attention as a
from costcalc.core.breakdown import add_up
from costcalc.vocab import Convention


@settings(max_examples=10, deadline=None)
@given(past=st.integers(0, 30), new=st.integers(1, 20), size=st.integers(1, 24), bq=st.integers(1, 9),
       bk=st.integers(1, 9), kind=st.sampled_from(["dense", "window.dense", "chunk.dense", "window.dense@rolling"]))
def test_every_closed_sum_is_keys_read_summed_position_by_position(past, new, size, bq, bk, kind):
    """attention_sum (a forward), steps_sum (decode steps) and keys_loaded are the one rule,
    keys_read, added up query by query: checked for every block kind and convention."""
    arch, _, cache = kind.partition("@")
    block = replace(coerce(arch), cache=cache or "whole")
    at = {s.W: size, s.W_c: size, s.b_q: bq, s.b_k: bk}

    def value(e):      # sums over tiles added term by term (sympy's Sum.doit misreads Min/ceiling bodies)
        return int(add_up(sp.sympify(e).xreplace(at)))

    for convention in Convention:
        per_query = [value(a.keys_read(convention, block, sp.Integer(p), sp.Integer(past), sp.Integer(new)))
                     for p in range(past + 1, past + new + 1)]
        assert value(a.attention_sum(convention, block, sp.Integer(past), sp.Integer(new))) == sum(per_query)
        steps = [value(a.keys_read(convention, block, sp.Integer(p), sp.Integer(p - 1), sp.Integer(1)))
                 for p in range(past + 1, past + new + 1)]
        assert value(a.steps_sum(convention, block, sp.Integer(past + 1), sp.Integer(past + new))) == sum(steps)
    loaded = value(a.keys_loaded(Convention.causal, block, sp.Integer(past), sp.Integer(new)))
    first = (value(a.chunk_start(sp.Integer(past + 1))) + 1 if block.attention == "chunk" else
             max(1, past + 2 - size) if block.attention == "window" else 1)
    assert loaded == past + new - first + 1     # every key from the first query's earliest legal key on


@pytest.mark.parametrize("seq", [1, 7, 1000, 4096])
def test_attention_fractions_of_a_prefill(seq):
    """causal / full is the triangle (S+1)/2S; a tile of one query and one key is causal; a tile
    covering the whole prompt computes the full rectangle."""
    assert calc.attention_fraction(seq, "causal") == Fraction(seq + 1, 2 * seq)
    assert calc.attention_fraction(seq, "tiled", (1, 1)) == calc.attention_fraction(seq, "causal")
    assert calc.attention_fraction(seq, "tiled", (seq, seq)) == calc.attention_fraction(seq, "full") == 1
