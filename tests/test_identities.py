"""Identities the cost model promises, proved symbolically and checked numerically."""
import random

import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from costcalc import calc, presets
from costcalc import symbols as s
from costcalc.core.breakdown import add_up
from named import attention, workloads as w

attention_flops = attention.attention_flops

n = sp.Symbol("n", integer=True, positive=True)


def same(a, b):
    return sp.expand(a - b) == 0


def test_uniform_chunks_keep_the_causal_total_symbolically():
    for arch in ("dense", "moe"):
        chunks = w.chunked(arch, "causal", n).all_terms()
        single = w.cached_prefill(arch, "causal", "last").map(lambda e: e.subs(s.C, n * s.C)).all_terms()
        assert all(same(chunks[t], single[t]) for t in single)


def test_uniform_chunks_under_full_charge_less_than_one_rectangle():
    chunks = w.chunked("dense", "full", n).terms["attention"]
    single = w.cached_prefill("dense", "full", "last").terms["attention"].subs(s.C, n * s.C)
    # The saving is the part of the n x n chunk grid above the diagonal: n(n-1)/2 blocks of C x C.
    assert same(single - chunks, 4 * s.L * s.B * s.d_q * s.C**2 * n * (n - 1) / 2)


def test_ragged_chunk_schedules_keep_the_causal_total():
    rng = random.Random(3)
    spec = presets.load("qwen3-30b-a3b")
    for _ in range(20):
        seq = rng.randint(1, 5000)
        chunk = rng.randint(1, seq)
        prefix = rng.choice([0, rng.randint(1, 3000)])
        rows = calc.chunked(spec, seq, chunk, prefix=prefix, batch=rng.randint(1, 4))
        total, single = rows[-2], rows[-1]
        assert total["phase"] == "total" and single["phase"] == "unchunked"
        assert {r["workload"] for r in rows} == {"chunked"}
        assert {k: v for k, v in total.items() if k.endswith("_flops")} == \
               {k: v for k, v in single.items() if k.endswith("_flops")}


def test_generation_attention_is_the_causal_triangle_of_s_plus_n_minus_1():
    gen = w.generate("dense", "causal", "last").terms["attention"]
    assert same(gen, attention_flops("causal", 0, s.S + s.N - 1, "dense") * s.B)


def test_moe_with_one_expert_is_dense_plus_router():
    moe = w.prefill("moe", "causal", "last").map(lambda e: e.subs({s.E: 1, s.k: 1, s.m_e: s.m}))
    dense = w.prefill("dense", "causal", "last")
    router = 2 * s.B * s.S * s.L * s.d  # [S, d] x [d, 1] per layer
    assert same(moe.total, dense.total + router)
    assert same(moe.terms["experts"], dense.terms["ffn"])


def test_causal_never_exceeds_full_symbolically():
    for past in (0, s.T):
        gap = sp.factor(attention_flops("full", past, s.C, "dense") - attention_flops("causal", past, s.C, "dense"))
        # 2 L d_q C (C - 1): zero for a single query, positive beyond
        assert same(gap, 2 * s.L * s.d_q * s.C * (s.C - 1))


# --- symbolic vs numeric on random shapes ---------------------------------------------

def brute_force_prefill(sizes, batch, past, new, convention, logits, arch):
    """Count matmul FLOPs by walking the model: a loop over layers, projections and queries."""
    d, dq, dkv = sizes["d"], sizes["h_q"] * sizes["d_h"], sizes["h_kv"] * sizes["d_h"]
    per_token = 2 * d * dq + 2 * d * dkv  # q, o; k, v
    if arch == "dense":
        per_token += 3 * d * sizes["m"]
    else:
        per_token += d * sizes["E"] + sizes["k"] * 3 * d * sizes["m_e"]
    linear = attention = 0
    for _layer in range(sizes["L"]):
        linear += 2 * new * per_token
        for q in range(1, new + 1):
            keys = past + q if convention == "causal" else past + new
            for _head in range(sizes["h_q"]):
                attention += 2 * sizes["d_h"] * keys + 2 * keys * sizes["d_h"]
    rows = 1 if logits == "last" else new
    head = 2 * rows * d * sizes["V"]
    return batch * (linear + attention) + batch * head


shape = st.fixed_dictionaries({
    "L": st.integers(1, 4), "d": st.integers(1, 64), "h_kv": st.integers(1, 4),
    "group": st.integers(1, 4), "d_h": st.integers(1, 16), "m": st.integers(1, 64),
    "E": st.integers(1, 8), "k": st.integers(1, 8), "m_e": st.integers(1, 32), "V": st.integers(1, 100),
})


@settings(max_examples=60, deadline=None)
@given(shape=shape, arch=st.sampled_from(["dense", "moe"]), batch=st.integers(1, 4),
       past=st.integers(0, 20), new=st.integers(1, 20),
       convention=st.sampled_from(["causal", "full"]), logits=st.sampled_from(["last", "all"]))
def test_symbolic_equals_brute_force(shape, arch, batch, past, new, convention, logits):
    sizes = {key: v for key, v in shape.items() if key != "group"}
    sizes["h_q"] = shape["h_kv"] * shape["group"]
    sizes["k"] = min(sizes["k"], sizes["E"])
    keep = ("L", "d", "h_q", "h_kv", "d_h", "V") + (("m",) if arch == "dense" else ("E", "k", "m_e"))
    from costcalc.spec import from_dict
    spec = from_dict({"name": "random", "arch": arch, **{key: sizes[key] for key in keep}}, "random")
    row = calc.cached_prefill(spec, new, past, batch, convention, logits)
    assert row["total_flops"] == brute_force_prefill(sizes, batch, past, new, convention, logits, arch)
    assert row["attention_flops"] <= calc.cached_prefill(spec, new, past, batch, "full", logits)["attention_flops"]
