"""DeepSeek Sparse Attention (an MLA block with a lightning indexer and top-k keys): every count held
against a brute-force loop over query positions (and keys), the workloads against one another, the
bytes and memory per token, the sparse-vs-dense decode crossover solved exactly, and the refusals."""
import json
import math
from fractions import Fraction
from pathlib import Path

import pytest
import sympy as sp

from cli_run import one_error, run
from costcalc import calc, symbols as s
from costcalc.blocks import Block, parse
from costcalc.core import traffic, workloads
from costcalc.crossover import crossover, dense_twin, sparse_row
from costcalc.devices import load as device
from costcalc.errors import CostcalcError
from costcalc.evaluate import Options, Query
from costcalc.memory import cache_per_token, fit
from costcalc.peers.base import KINDS, features
from costcalc.roofline import Machine, Precision
from costcalc.spec import from_dict
from costcalc.vocab import Convention

PRESET = Path(__file__).parent / "data" / "dsa-tiny.json"
DATA = json.loads(PRESET.read_text())
SPEC = from_dict(DATA, str(PRESET))
SIZES = {k: v for k, v in DATA.items() if isinstance(v, int)}          # the attention and indexer sizes
LAYERS = sum(layer["count"] for layer in DATA["layers"])
K_I = SIZES["k_I"]

# per (query, key) pair and layer, written out by hand from the shapes
INDEXER_PAIR = 2 * SIZES["h_I"] * SIZES["d_I"] + 2 * SIZES["h_I"]
NAIVE_PAIR = 2 * SIZES["h_q"] * (SIZES["d_nope"] + SIZES["d_rope"] + SIZES["d_v"])
ABSORBED_PAIR = 2 * SIZES["h_q"] * (2 * SIZES["r_kv"] + SIZES["d_rope"])
INDEXER_PROJ = 2 * (SIZES["r_q"] * SIZES["h_I"] * SIZES["d_I"] + SIZES["d"] * SIZES["d_I"] + SIZES["d"] * SIZES["h_I"])


# --- brute force: a query at 1-based position p, after `past` cached, in a forward of `new` -----

def selected(p, past, new, full):
    """Keys the main attention reads: its top-k of its p legal keys (causal), every key (full)."""
    return past + new if full else min(p, K_I)


def scored(p, past, new, full):
    """Keys the indexer scores: every legal key (causal), the whole rectangle (full)."""
    return past + new if full else p


def brute(rule, past, new, full):
    return sum(rule(p, past, new, full) for p in range(past + 1, past + new + 1))


def steps(rule, prompt, new_tokens, full=False):
    """A decode phase: the steps at positions prompt+1 .. prompt+new_tokens-1, one query each."""
    return sum(rule(p, p - 1, 1, full) for p in range(prompt + 1, prompt + new_tokens))


def at(expr, **values):
    point = {getattr(s, k): v for k, v in {**SIZES, "L": 1, "B": 1, **values}.items()}
    return int(sp.sympify(expr).xreplace(point).doit())


BLOCKS = [parse(k) for k in ("mla_q-sparse.dense", "mla_q-sparse-absorbed.moe_shared", "mla-sparse.dense")]


# --- the block key ------------------------------------------------------------------------------

@pytest.mark.parametrize("key", ["mla_q-sparse.moe_shared", "mla_q-sparse-absorbed.moe_shared", "mla-sparse.dense",
                                 "mla-sparse-expanded.moe"])
def test_sparse_keys_read_back(key):
    block = parse(key)
    assert block.sparse and block.attention == "mla" and block.key == key
    assert block.with_form("absorbed").sparse


def test_a_sparse_block_is_mla_with_the_indexer_sizes():
    assert Block(attention="mla", sparse=True).key == "mla-sparse.dense"
    assert parse("mla_q-sparse.dense").sizes()[-4:] == ("h_I", "d_I", "k_I", "m")
    assert "k_I" not in parse("mla_q.dense").sizes()


@pytest.mark.parametrize("key", ["gqa-sparse.dense", "window-sparse.moe", "gdn-sparse.dense"])
def test_sparse_applies_to_mla_only(key):
    with pytest.raises(ValueError, match="applies to mla attention only"):
        parse(key)
    with pytest.raises(ValueError, match="applies to mla attention only"):
        Block(attention=key.split("-")[0], sparse=True)


# --- FLOPs of one forward, against the loops ----------------------------------------------------

@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.key)
@pytest.mark.parametrize("full", [False, True], ids=["causal", "full"])
@pytest.mark.parametrize("past, new", [(0, 1), (0, 4), (0, 5), (0, 13), (3, 1), (4, 1), (9, 1), (2, 3), (3, 9),
                                       (7, 6), (20, 2)])
def test_every_forward_is_the_loop_over_its_queries(block, full, past, new):
    conv = Convention.full if full else Convention.causal
    got = workloads.forward(block, conv, "last", sp.Integer(past), sp.Integer(new))
    per_pair = NAIVE_PAIR if block.form != "absorbed" else ABSORBED_PAIR
    assert at(got.operators["attention"]) == per_pair * brute(selected, past, new, full)
    assert at(got.operators["indexer"]) == INDEXER_PAIR * brute(scored, past, new, full)
    proj = sum(at(e) for op, e in got.operators.items() if op.startswith("indexer."))
    q_in = SIZES["r_q"] if block.q_lora else SIZES["d"]
    assert proj == new * 2 * (q_in * SIZES["h_I"] * SIZES["d_I"] + SIZES["d"] * (SIZES["d_I"] + SIZES["h_I"]))
    assert got.terms.keys() >= {"indexer_proj", "indexer", "attention"}


def test_the_sparse_block_is_its_dense_twin_plus_the_indexer_up_to_k_keys():
    for wl in (workloads.prefill, workloads.decode, workloads.cached_prefill):
        sparse, dense = wl(parse("mla_q-sparse.moe"), "causal"), wl(parse("mla_q.moe"), "causal")
        for op, expr in dense.operators.items():
            if op != "attention":
                assert sp.expand(sparse.operators[op] - expr) == 0, op
        big = {"S": 7, "T": 3, "C": 4, "k_I": 10 ** 6}       # a top-k above every position: dense attention
        assert at(sparse.operators["attention"], **big) == at(dense.operators["attention"], **big)


# --- workloads: one another ---------------------------------------------------------------------

def rows_equal(a, b, keys):
    assert {k: a[k] for k in keys} == {k: b[k] for k in keys}


FLOPS = ("attn_proj_flops", "indexer_proj_flops", "attention_flops", "indexer_flops", "linear_flops", "total_flops")


@pytest.mark.parametrize("convention", ["causal", "full"])
@pytest.mark.parametrize("prompt, new_tokens", [(1, 2), (3, 5), (4, 9), (12, 4)])
def test_a_decode_phase_is_its_steps_added_up_and_a_generation_its_prefill_and_steps(convention, prompt, new_tokens):
    phase = calc.point(Query(SPEC, "decode_phase", Options(convention)), batch=2, seq=prompt, new_tokens=new_tokens)
    stepped = [calc.decode(SPEC, t, 2, convention) for t in range(prompt, prompt + new_tokens - 1)]
    for key in FLOPS:
        assert phase[key] == sum(r[key] for r in stepped), key
    full = convention == "full"
    assert phase["attention_flops"] == 2 * LAYERS * ABSORBED_PAIR * steps(selected, prompt, new_tokens, full)
    assert phase["indexer_flops"] == 2 * LAYERS * INDEXER_PAIR * steps(scored, prompt, new_tokens, full)
    gen = {r["phase"]: r for r in calc.generate(SPEC, prompt, new_tokens, 2, convention)}
    pre = calc.prefill(SPEC, prompt, 2, convention)
    for key in FLOPS:
        assert gen["total"][key] == pre[key] + phase[key], key


@pytest.mark.parametrize("convention", ["causal", "full"])
@pytest.mark.parametrize("past, new", [(1, 1), (4, 1), (5, 1), (30, 1), (0, 9), (6, 3), (2, 11)])
def test_prefill_cached_prefill_and_decode_are_one_forward(convention, past, new):
    full = convention == "full"
    chunk = calc.cached_prefill(SPEC, new, past, 3, convention, mla="naive")
    if past == 0:
        rows_equal(chunk, calc.prefill(SPEC, new, 3, convention, mla="naive"), FLOPS)
    if new == 1:
        rows_equal(chunk, calc.decode(SPEC, past, 3, convention, mla="naive"), FLOPS)
    assert chunk["attention_flops"] == 3 * LAYERS * NAIVE_PAIR * brute(selected, past, new, full)
    assert chunk["indexer_flops"] == 3 * LAYERS * INDEXER_PAIR * brute(scored, past, new, full)
    assert chunk["indexer_proj_flops"] == 3 * new * LAYERS * INDEXER_PROJ


@pytest.mark.parametrize("seq, size, prefix", [(13, 4, 0), (12, 3, 5), (7, 7, 2), (9, 2, 30)])
def test_a_chunked_prompt_is_its_chunks_added_up(seq, size, prefix):
    table = {r["phase"]: r for r in calc.chunked(SPEC, seq, size, prefix)}
    pieces = [table[f"chunk {i + 1}"] for i in range(-(-seq // size))]
    assert len(table) == len(pieces) + 2
    for r in pieces:      # each chunk is the cached prefill of its tokens over what came before it
        alone = calc.cached_prefill(SPEC, r["chunk"], r["prefix"], logits="last")
        rows_equal(r, alone, ("attention_flops", "indexer_flops", "indexer_proj_flops"))
    for key in ("attention_flops", "indexer_flops", "indexer_proj_flops", "total_flops"):
        assert table["total"][key] == sum(r[key] for r in pieces), key
    for key in ("attention_flops", "indexer_flops"):
        assert table["total"][key] == table["unchunked"][key], key
    # every chunk's queries in turn: the same pairs as the one pass over the prompt
    assert table["total"]["attention_flops"] == LAYERS * NAIVE_PAIR * brute(selected, prefix, seq, False)
    assert table["total"]["indexer_flops"] == LAYERS * INDEXER_PAIR * brute(scored, prefix, seq, False)


def test_a_uniform_chunk_schedule_has_no_closed_form_over_a_top_k():
    with pytest.raises(ValueError, match="sparse attention"):
        workloads.chunked(parse("mla-sparse.dense"))


# --- bytes --------------------------------------------------------------------------------------

KV_ABSORBED = SIZES["r_kv"] + SIZES["d_rope"]


def test_a_decode_step_reads_the_whole_index_cache_and_the_selected_latent_rows():
    block = parse("mla_q-sparse-absorbed.dense")
    moved = traffic.build("decode", block, "causal")
    for t in (0, 1, 3, 4, 5, 9, 100):
        assert at(moved["indexer.kv_read"], T=t) == (t + 1) * SIZES["d_I"]
        assert at(moved["attention.kv_read"], T=t) == min(t + 1, K_I) * KV_ABSORBED
        assert at(moved["indexer.kv_write"], T=t) == SIZES["d_I"]
        assert at(moved["attention.kv_write"], T=t) == KV_ABSORBED
    dense = traffic.build("decode", block, "full")
    assert at(dense["attention.kv_read"], T=100) == 101 * KV_ABSORBED


@pytest.mark.parametrize("convention", ["causal", "full"])
def test_a_decode_phase_moves_what_its_steps_move(convention):
    block = parse("mla_q-sparse-absorbed.dense")
    phase, step = traffic.build("decode_phase", block, convention), traffic.build("decode", block, convention)
    for prompt, n in ((1, 2), (3, 6), (9, 4)):
        for key in [k for k in phase if k.startswith(("attention.", "indexer"))]:
            assert at(phase[key], S=prompt, N=n) == sum(at(step[key], T=t) for t in range(prompt, prompt + n - 1)), key


def test_a_forward_loads_each_selected_row_once_at_most_and_never_more_than_the_cache():
    block = parse("mla_q-sparse.dense")
    width = SIZES["h_q"] * (SIZES["d_nope"] + SIZES["d_rope"] + SIZES["d_v"])     # the naive form's K and V
    for past, new in ((0, 1), (0, 12), (3, 1), (3, 2), (20, 2), (20, 3), (2, 30), (40, 8)):
        moved = traffic.forward(block, Convention.causal, "last", sp.Integer(past), sp.Integer(new), sp.Integer(1))
        union_bound = min(past + new, brute(selected, past, new, False))
        assert at(moved["attention.kv_read"]) == width * union_bound
        assert at(moved["indexer.kv_read"]) == (past + new) * SIZES["d_I"]
        assert at(moved["indexer.kv_write"]) == new * SIZES["d_I"]
        assert at(moved["indexer.activation"]) == new * (SIZES["h_I"] * SIZES["d_I"] + SIZES["h_I"])


def test_memory_keeps_the_index_key_beside_the_latent_per_token():
    query = Query(SPEC, "decode", Options(), Precision(), Machine(device("h200")))
    per_token = cache_per_token(query)
    assert [keep for keep, _ in per_token] == [0, 0]                       # every token kept: a top-k is no window
    assert [per for _, per in per_token] == [g.count * (KV_ABSORBED + SIZES["d_I"]) * 2 for g in SPEC.groups]
    rows = {t: fit(query, 2, t) for t in (10, 1000)}
    assert rows[1000]["kv_cache_bytes"] - rows[10]["kv_cache_bytes"] == 2 * 990 * LAYERS * (KV_ABSORBED + SIZES["d_I"]) * 2


@pytest.mark.parametrize("index, per_key", [(None, 2 * SIZES["d_I"]), ("fp32", 4 * SIZES["d_I"]),
                                             # fp8: one byte an element and an fp32 scale per 128 of them
                                             ("fp8", SIZES["d_I"] + 4 * -(-SIZES["d_I"] // 128))])
def test_the_index_keys_are_kept_and_read_in_the_index_dtype(index, per_key):
    """--index-dtype sets the indexer's key cache apart from the latent's (bf16 KV here)."""
    query = Query(SPEC, "decode", Options(), Precision(index=index), Machine(device("h200")))
    assert [per for _, per in cache_per_token(query)] == [g.count * (KV_ABSORBED * 2 + per_key) for g in SPEC.groups]
    plain = calc.answer(query.but(precision=Precision()), batch=[1], context=[999])
    row = calc.answer(query, batch=[1], context=[999])
    # a decode step at context 999 writes one index key and reads 1000, in every layer
    assert row["kv_read_bytes"][0] - plain["kv_read_bytes"][0] == LAYERS * 1000 * (per_key - 2 * SIZES["d_I"])
    assert row["kv_write_bytes"][0] - plain["kv_write_bytes"][0] == LAYERS * (per_key - 2 * SIZES["d_I"])
    assert row["index_dtype"][0] == (index or "bf16")


@pytest.mark.parametrize("index", [None, "fp8", "fp32"])
def test_the_time_crossover_reads_the_index_keys_in_their_dtype(index):
    """t_equal_time: the keys a step reads at which its K/V bytes -- the latent rows and every index
    key, each in its own dtype -- reach its weight bytes; held to the bytes a step at that context moves."""
    precision, batch = Precision(index=index), 4
    row = crossover(SPEC, ["causal"], precision=precision, batch=batch)[0]
    keys = Fraction(row["t_equal_time_exact"])

    def step(context):
        got = calc.answer(Query(SPEC, "decode", Options(), precision), batch=[batch], context=[context])
        return got["kv_read_bytes"][0], got["weight_bytes"][0]
    before, after = step(math.ceil(keys) - 2), step(math.ceil(keys) - 1)    # keys read = context + 1
    assert before[0] < before[1] and after[0] >= after[1]
    if index == "fp32":     # index keys twice the bf16 ones: the cache reaches the weights sooner
        assert keys < Fraction(crossover(SPEC, ["causal"], precision=Precision(), batch=batch)[0]["t_equal_time_exact"])


def test_an_index_dtype_on_a_model_without_an_indexer_says_it_does_nothing(capsys):
    code, out, err = run(capsys, "decode", "-p", "toy", "--context", "16", "--index-dtype", "fp8")
    assert code == 0 and "--index-dtype does nothing" in err
    code, out, err = run(capsys, "decode", "-p", "toy", "--context", "16", "--index-dtype", "fp9")
    assert code == 2 and one_error(err, "--index-dtype")


# --- the sparse-vs-dense decode crossover --------------------------------------------------------

def step_total(spec, context):
    return calc.decode(spec, context)["total_flops"]


@pytest.mark.parametrize("k_i", [2, 5, 6, 40])
def test_the_sparse_decode_crossover_is_exact_and_the_sides_swap_there(k_i):
    spec = SPEC.with_sizes(k_I=k_i)
    dense = dense_twin(spec)
    assert not any(g.block.sparse for g in dense.groups) and "indexer_flops" not in calc.decode(dense, 3)
    row = sparse_row(spec)
    # every layer has the same attention and indexer: per layer P_I + u_I K < u_A (K - k_I) past k_I
    keys = Fraction(INDEXER_PROJ + ABSORBED_PAIR * k_i, ABSORBED_PAIR - INDEXER_PAIR)
    assert keys > k_i
    assert Fraction(row["exact"]) == keys and Fraction(row["context_exact"]) == keys - 1
    t = row["first_cheaper_context"]
    assert t == int(keys - 1) + 1 and t - 1 <= keys - 1 < t
    assert step_total(spec, t - 1) >= step_total(dense, t - 1)
    assert step_total(spec, t) < step_total(dense, t)
    assert step_total(spec, t + 1) < step_total(dense, t + 1)
    if (keys - 1).denominator == 1:
        assert step_total(spec, t - 1) == step_total(dense, t - 1)
    assert all(step_total(spec, c) > step_total(dense, c) for c in range(1, min(k_i, t - 1)))


def test_a_model_whose_indexer_costs_more_per_key_is_never_cheaper_sparse():
    spec = SPEC.with_sizes(h_I=8, d_I=8)
    row = sparse_row(spec)
    assert row["exact"] == "never" and row["first_cheaper_context"] is None
    assert step_total(spec, 5000) > step_total(dense_twin(spec), 5000)


def test_the_crossover_rows_of_a_sparse_model_add_the_sparse_row_and_keep_the_others():
    rows = crossover(SPEC)
    assert [r["quantity"] for r in rows] == ["decode_t_equal", "prefill_attention_equals_linear",
                                             "prefill_attention_equals_linear", "sparse_decode_cheaper"]
    assert rows[-1]["mla"] == "absorbed"
    assert not any(r["quantity"] == "sparse_decode_cheaper" for r in crossover(dense_twin(SPEC)))


@pytest.mark.parametrize("k_i", [5, 10 ** 6])
def test_the_decode_crossover_counts_the_indexer_with_attention(k_i):
    """T_equal of a sparse model: attention with its indexer's scores against the linear layers. With
    a top-k beyond the crossover attention itself grows with T; with a top-k of 5 it stops growing
    at 5 keys, and the indexer, which scores every key, carries the gap to the linear layers."""
    spec = SPEC.with_sizes(k_I=k_i)
    keys = Fraction(crossover(spec)[0]["exact"])

    def grows(row):
        return row["attention_flops"] + row["indexer_flops"]
    below, above = (calc.decode(spec, math.ceil(keys) - 2), calc.decode(spec, math.ceil(keys) - 1))  # keys = T + 1
    assert grows(below) <= below["linear_flops"] < grows(above)
    assert (above["attention_flops"] == LAYERS * ABSORBED_PAIR * k_i) == (k_i == 5)   # capped only at a top-k of 5
    assert above["attention_flops"] < above["linear_flops"]


# --- refusals -----------------------------------------------------------------------------------

def test_tiled_is_refused_in_one_line(capsys):
    code, _, err = run(capsys, "prefill", "--preset-file", str(PRESET), "--seq", "64", "--convention", "tiled")
    assert code != 0 and one_error(err, "the tiled convention does not apply to sparse attention")
    with pytest.raises(CostcalcError, match="selected keys|indexer selects"):
        Query(SPEC, "decode", Options("tiled"))
    with pytest.raises(ValueError, match="not tiles"):
        workloads.prefill(parse("mla-sparse.dense"), "tiled")


def test_verify_runs_a_sparse_model(capsys):
    """The verifier's torch indexer (tests/test_verify.py holds every workload and convention)."""
    code, out, err = run(capsys, "verify", "--preset-file", str(PRESET), "--seq", "9", "--workloads", "decode",
                         "--repeats", "0", "--device", "cpu")
    assert code == 0 and out.strip().splitlines()[-1].endswith(" checks, 0 mismatches")
    assert "indexer" in out


def test_the_peers_refuse_sparse_layers_by_name():
    assert features(parse("mla_q-sparse.moe_shared")) == {"sparse"}
    assert "sparse" not in features(parse("mla_q.moe_shared"))
    assert "indexer" in KINDS["sparse"]


def test_the_cli_prints_the_sparse_terms(capsys):
    code, out, err = run(capsys, "decode", "--preset-file", str(PRESET), "--context", "12", "--format", "json")
    assert code == 0, err
    row = json.loads(out)[0]
    assert row["indexer_flops"] == LAYERS * INDEXER_PAIR * 13
    assert row["attention_flops"] == LAYERS * ABSORBED_PAIR * K_I
    assert row["indexer_proj_flops"] == LAYERS * INDEXER_PROJ


@pytest.mark.parametrize("seq, prefix", [(3, 20), (40, 20), (1, 7), (12, 0)])
def test_the_compiled_bytes_of_a_chunk_are_the_union_bound(capsys, seq, prefix):
    code, out, err = run(capsys, "prefill", "--preset-file", str(PRESET), "--seq", str(seq), "--cached-prefix",
                         str(prefix), "--device", "h200", "--format", "json")
    assert code == 0, err
    row = json.loads(out)[0]
    naive = SIZES["h_q"] * (SIZES["d_nope"] + SIZES["d_rope"] + SIZES["d_v"])      # prefill under auto: naive
    rows = min(prefix + seq, brute(selected, prefix, seq, False))
    assert row["kv_read_bytes"] == LAYERS * (naive * rows + SIZES["d_I"] * (prefix + seq)) * 2
    assert row["kv_write_bytes"] == LAYERS * seq * (naive + SIZES["d_I"]) * 2
