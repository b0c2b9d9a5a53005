"""Chunked local attention (``chunk``, W_c) and the non-gated MLP (``mlp``): every derived formula
against brute-force loops over queries and keys, the generated code against sympy, crossovers
against a scan of the lengths."""
import numpy as np
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from brute import UNIT, keys, pairs, tiled
from costcalc import calc, codegen
from costcalc import symbols as s
from costcalc.core.breakdown import add_up
from costcalc.spec import from_dict
from costcalc.vocab import Convention, Logits
from named import workloads as w


@settings(max_examples=40, deadline=None)
@given(past=st.integers(0, 60), new=st.integers(1, 60), size=st.integers(1, 30),
       bq=st.integers(1, 9), bk=st.integers(1, 9))
def test_chunk_attention_equals_a_loop_under_every_convention(past, new, size, bq, bk):
    point = {**UNIT, s.T: past, s.C: new, s.W_c: size, s.b_q: bq, s.b_k: bk}
    got = {c: w.cached_prefill("chunk.dense", c).terms["attention"] for c in ("causal", "full", "tiled")}
    assert got["causal"].xreplace(point) == 4 * pairs(past, new, chunk=size)
    assert got["full"].xreplace(point) == 4 * pairs(past, new, full=True)
    assert add_up(got["tiled"].xreplace(point)) == 4 * tiled(past, new, bq, bk, chunk=size)
    for conv, expect in (("causal", keys(past + 1, chunk=size)), ("full", past + 1), ("tiled", tiled(past, 1, bq, bk, chunk=size))):
        step = w.decode("chunk.dense", conv).terms["attention"].xreplace({**point, s.T: past})
        assert add_up(step) == 4 * expect, conv


@settings(max_examples=30, deadline=None)
@given(prompt=st.integers(1, 50), new=st.integers(1, 50), size=st.integers(1, 40), bq=st.integers(1, 5),
       bk=st.integers(1, 5))
def test_chunked_decode_phase_is_its_steps(prompt, new, size, bq, bk):
    point = {**UNIT, s.S: prompt, s.N: new, s.W_c: size, s.b_q: bq, s.b_k: bk}
    for conv, one in (("causal", lambda t: keys(t + 1, chunk=size)), ("full", lambda t: t + 1),
                      ("tiled", lambda t: tiled(t, 1, bq, bk, chunk=size))):
        phase = w.decode_phase("chunk.moe", conv).terms["attention"]
        assert add_up(phase.xreplace(point)) == 4 * sum(one(prompt + j - 1) for j in range(1, new)), conv


def test_a_chunk_covering_the_context_is_causal_attention():
    n = sp.Symbol("n", integer=True, nonnegative=True)
    for make, wide in ((w.prefill, s.S + n), (w.cached_prefill, s.T + s.C + n), (w.decode, s.T + 1 + n)):
        chunked = make("chunk.dense").terms["attention"].subs(s.W_c, wide)
        plain = make("gqa.dense").terms["attention"]
        # floor((x)/(x + n + ...)) is 0 for every length inside the chunk: check it at points
        for point in ({s.S: 7, s.T: 5, s.C: 3, n: 0}, {s.S: 100, s.T: 64, s.C: 17, n: 9}):
            values = {**UNIT, **point}
            assert chunked.xreplace(values) == plain.xreplace(values)


def test_the_generated_code_prints_the_chunk_formulas_exactly():
    spec = from_dict({"name": "c", "d": 64, "V": 100, "h_q": 4, "h_kv": 2, "d_h": 16, "m": 96, "W_c": 37,
                      "arch": "chunk.mlp", "L": 3}, "c")
    bd = w.prefill("chunk.mlp", "causal", "all")
    for seq in (1, 36, 37, 38, 5000, 123457):
        row = calc.prefill(spec, seq, 2, "causal", logits="all")
        values = {s.BY_NAME[k]: sp.Integer(v) for k, v in spec.groups[0].numbers().items()} | {s.B: 2, s.S: seq}
        assert row["attention_flops"] == bd.terms["attention"].xreplace(values)
        assert row["attention_flops"] == 2 * 3 * 4 * 64 * pairs(0, seq, chunk=37)   # B L 4 d_q
    data = codegen.recipe("prefill", spec.groups[0].block, Convention.causal, Logits.last)
    assert any("//" in term["expr"] for term in data["terms"])
    # a sweep over arrays gives the same exact integers
    seqs = np.arange(30, 330)
    cols = calc.table(spec, "prefill", "causal", batch=np.full(seqs.size, 2), seq=seqs)
    assert cols["attention_flops"] == [calc.prefill(spec, int(q), 2)["attention_flops"] for q in seqs]


def scan(spec, name, conv, limit):
    """The first length (decode: keys read) where attention >= linear, by evaluating every length."""
    xs = np.arange(2 if name == "decode" else 1, limit)
    inputs = {"context": xs - 1} if name == "decode" else {"seq": xs}
    cols = calc.table(spec, name, conv, batch=np.ones(xs.size, dtype=np.int64), **inputs)
    hit = [int(x) for x, a, li in zip(xs, cols["attention_flops"], cols["linear_flops"]) if a >= li]
    return hit[0] if hit else None


def test_crossovers_over_chunks_are_where_a_scan_finds_them():
    for layers in ([{"count": 3, "arch": "chunk.mlp"}],
                   [{"count": 3, "arch": "chunk.mlp"}, {"count": 1, "arch": "gqa.dense"}],
                   [{"count": 3, "arch": "chunk.dense"}, {"count": 1, "arch": "window.dense", "W": 700}]):
        for size in (100, 333, 5000):
            spec = from_dict({"name": "c", "d": 512, "V": 1000, "h_q": 8, "h_kv": 2, "d_h": 64, "m": 1024,
                              "W_c": size, "layers": layers}, "c")
            rows = calc.crossover(spec)
            for row, (name, conv) in zip(rows, (("decode", "causal"), ("prefill", "causal"), ("prefill", "full"))):
                found = scan(spec, name, conv, 20000)
                if found is None:
                    assert row["exact"] == "never", (layers, size, name, conv)
                else:
                    assert row["tokens"] is not None and found - 1 < row["tokens"] <= found, (layers, size, name, conv)


def test_a_chunked_layer_caches_one_chunk_and_a_decode_step_loads_its_chunk():
    from costcalc import memory, presets
    from costcalc.evaluate import Query
    from costcalc.roofline import Precision

    spec = presets.load("llama-4-scout-17b-16e")          # 36 chunked (8192) + 12 global layers
    per_layer = 2 * 8 * 128 * 2                           # K and V, h_kv d_h each, 2 bytes (bf16)
    for context in (4096, 8192, 100_000):
        expect = per_layer * (12 * context + 36 * min(context, 8192))
        assert memory.kv_cache_bytes(Query(spec, "decode", memory.SERVING, Precision()), 1, context) == expect
    # a decode step's K/V read in a chunked layer: the keys of its own chunk (itself included)
    point = {**UNIT, s.T: 10_000, s.W_c: 8192, s.d_kv: 1}
    from named import traffic

    build = traffic.build

    read = build("decode", "chunk.dense")["attention.kv_read"]
    assert read.xreplace(point) == 2 * keys(10_001, chunk=8192)
