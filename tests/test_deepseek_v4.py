"""DeepSeek-V4's layers (``swa``, ``hca``, ``csa``: a rolling window, compressed entries, an indexer over
them; the grouped output LoRA; hyper-connections) held against brute-force loops over query positions
written from transformers 5.23's modeling_deepseek_v4 rules, the workloads against one another, the
bytes, and the refusals. What transformers itself builds and counts: tests/test_hf_deepseek_v4.py."""
import json
from pathlib import Path

import pytest
import sympy as sp

from cli_run import run
from costcalc import calc, symbols as s
from costcalc.blocks import Block, parse
from costcalc.core import linear, traffic, workloads
from costcalc.errors import CostcalcError
from costcalc.evaluate import Options, Query
from costcalc.spec import from_dict
from costcalc.vocab import Convention

PRESET = Path(__file__).parent / "data" / "v4-tiny.json"
DATA = json.loads(PRESET.read_text())
SPEC = from_dict(DATA, str(PRESET))
TOP = {k: v for k, v in DATA.items() if isinstance(v, int)}
GROUPS = {g["arch"].split(".")[0]: {**TOP, **{k: v for k, v in g.items() if isinstance(v, int) and k != "count"}}
          for g in DATA["layers"]}
KINDS = ("swa", "csa", "hca")


# --- brute force, from the rules of modeling_deepseek_v4 (1-based query position p) -----------------

def window(p, past, new, full):
    """Window keys: causal itself and the W-1 before it; full what the rolling cache (W-1 kept) and
    the forward's new tokens hold, every query all of them."""
    W = TOP["W"]
    return min(past, W - 1) + new if full else min(p, W)


def compressed(kind, p, past, new, full):
    """Compressed entries: entry w (0-based) covers tokens wR+1..(w+1)R and is legal for the query at
    p iff w < p // R; full: every entry emitted by the end of the forward; csa keeps its top k_I."""
    if kind == "swa":
        return 0
    z = GROUPS[kind]
    legal = sum(1 for w in range((past + new) // z["R_c"]) if w < p // z["R_c"])
    if full:
        return (past + new) // z["R_c"]
    return min(legal, z["k_I"]) if kind == "csa" else legal


def index_pairs(p, past, new, full):
    z = GROUPS["csa"]
    return (past + new) // z["R_c"] if full else p // z["R_c"]


def brute(rule, past, new, full, *args):
    return sum(rule(*args, p, past, new, full) for p in range(past + 1, past + new + 1))


def pair(kind):
    """QK^T and AV of one (query, key) pair: h_q heads over one K=V vector of d_h."""
    z = GROUPS[kind]
    return 2 * z["h_q"] * z["d_h"] * 2


def at(expr, kind, **values):
    point = {getattr(s, k): v for k, v in {**GROUPS[kind], "L": 1, "B": 1, **values}.items()}
    return int(sp.sympify(expr).xreplace(point).doit())


# --- block keys and sizes -----------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_the_v4_keys_read_back_with_their_sizes(kind):
    block = parse(f"{kind}.moe_shared")
    assert block.v4 and block.attends and block.key == f"{kind}.moe_shared"
    sizes = block.sizes()
    assert {"h_q", "d_h", "r_q", "G_o", "r_o", "W", "n_hc"} <= set(sizes)
    assert ("R_c" in sizes) == (kind != "swa") and ("k_I" in sizes) == (kind == "csa")


def test_no_mixer_beside_a_v4_layer():
    with pytest.raises(ValueError, match="DeepSeek-V4"):
        Block(attention="csa", beside="mamba2")


# --- the projections, by hand from the module shapes ----------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_linear_flops_per_token_are_the_module_shapes(kind):
    z = GROUPS[kind]
    d, hq, dh, rq, g, ro, hc = (z[k] for k in ("d", "h_q", "d_h", "r_q", "G_o", "r_o", "n_hc"))
    got = workloads.forward(parse(f"{kind}.moe_shared"), Convention.causal, "last", sp.Integer(0), sp.Integer(1))
    ops = {op: at(e, kind) for op, e in got.operators.items()}
    attn = 2 * (d * rq + rq * hq * dh + d * dh + g * (hq * dh // g) * ro + g * ro * d)
    if kind != "swa":
        width = 2 * dh if kind == "csa" else dh
        attn += 2 * 2 * d * width                          # the compressor's kv_proj and gate_proj
    assert sum(v for op, v in ops.items() if got.term(op) == "attn_proj") == attn
    # two hyper-connections: fn (n_hc d -> n_hc (2 + n_hc)) and the comb mix ([n_hc, n_hc] x [n_hc, d])
    assert sum(v for op, v in ops.items() if got.term(op) == "hyper") == 2 * (2 * hc * d * hc * (2 + hc) + 2 * hc * hc * d)
    assert ops["hc_head"] == 2 * hc * d * hc
    if kind == "csa":
        hI, dI = z["h_I"], z["d_I"]
        assert sum(v for op, v in ops.items() if got.term(op) == "indexer_proj") == 2 * (2 * 2 * d * dI + rq * hI * dI + d * hI)
    else:
        assert "indexer" not in ops and not any(got.term(op) == "indexer_proj" for op in ops)


def test_the_grouped_output_weights_and_the_comb_mix_have_no_weight_of_their_own():
    z = GROUPS["csa"]
    block = parse("csa.moe_shared")
    params = {k: at(e, "csa") for k, e in linear.block_params(block).items()}
    shapes = {p.name: (p.fan_in, p.fan_out, p.instances) for p in linear.block(block)}
    o_a = at(sp.Mul(*shapes["o_a_proj"]), "csa")
    assert o_a == z["h_q"] * z["d_h"] * z["r_o"]          # G_o blocks of (h_q d_h / G_o) x r_o
    assert params["hc_head"] == z["n_hc"] * z["d"] * z["n_hc"]
    assert not any(p.weight for p in linear.block(block) if p.name.endswith(".comb"))


# --- attention and indexer FLOPs of one forward, against the loops --------------------------------

@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("full", [False, True], ids=["causal", "full"])
@pytest.mark.parametrize("past, new", [(0, 1), (0, 4), (0, 9), (0, 40), (3, 1), (7, 1), (15, 1), (63, 1), (5, 11),
                                       (30, 19)])
def test_every_forward_is_the_loop_over_its_queries(kind, full, past, new):
    conv = Convention.full if full else Convention.causal
    got = workloads.forward(parse(f"{kind}.moe_shared"), conv, "last", sp.Integer(past), sp.Integer(new))
    keys = brute(window, past, new, full) + brute(lambda *a: compressed(kind, *a), past, new, full)
    assert at(got.operators["attention"], kind) == pair(kind) * keys
    if kind == "csa":
        z = GROUPS["csa"]
        assert at(got.operators["indexer"], kind) == 2 * z["h_I"] * z["d_I"] * brute(index_pairs, past, new, full)


@pytest.mark.parametrize("convention", ["causal", "full"])
@pytest.mark.parametrize("prompt, new_tokens", [pytest.param(1, 2, marks=pytest.mark.slow), (3, 6),
                                                pytest.param(7, 30, marks=pytest.mark.slow), (40, 5)])
def test_a_decode_phase_is_its_steps_added_up(convention, prompt, new_tokens):
    phase = calc.point(Query(SPEC, "decode_phase", Options(convention)), batch=2, seq=prompt, new_tokens=new_tokens)
    stepped = [calc.decode(SPEC, t, 2, convention) for t in range(prompt, prompt + new_tokens - 1)]
    for key in ("attn_proj_flops", "hyper_flops", "attention_flops", "indexer_flops", "hc_head_flops", "total_flops"):
        assert phase[key] == sum(r[key] for r in stepped), key


def test_a_cached_prefill_of_one_token_is_a_decode_step_and_the_model_sums_its_groups():
    for conv in ("causal", "full"):
        step, chunk = calc.decode(SPEC, 37, 1, conv), calc.cached_prefill(SPEC, 1, 37, 1, conv)
        assert step["total_flops"] == chunk["total_flops"]
    row = calc.prefill(SPEC, 40, 1, "full", logits="all")
    per_kind = [workloads.prefill(parse(f"{k}.moe_shared"), Convention.full, "all") for k in KINDS]
    head = {"hc_head", "lm_head"}          # once per model
    body = sum(at(e, k, S=40) for k, b in zip(KINDS, per_kind) for op, e in b.operators.items() if op not in head)
    once = sum(at(per_kind[0].operators[op], "swa", S=40) for op in head)
    assert row["total_flops"] == body + once


# --- bytes ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("past", [0, 3, 15, 16, 40])
def test_a_step_reads_d_h_per_key_and_writes_the_entries_it_completes(kind, past):
    moved = traffic.forward(parse(f"{kind}.moe_shared"), Convention.causal, "last", sp.Integer(past), sp.Integer(1))
    z = GROUPS[kind]
    keys = window(past + 1, past, 1, False) + compressed(kind, past + 1, past, 1, False)
    assert at(moved["attention.kv_read"], kind) == keys * z["d_h"]
    assert at(moved["attention.kv_write"], kind) == z["d_h"]
    done = (past + 1) // z["R_c"] - past // z["R_c"] if kind != "swa" else 0
    assert at(moved.get("compressor.kv_proj.kv_write", 0), kind) == done * z["d_h"]
    if kind == "csa":
        assert at(moved["indexer.kv_write"], kind) == done * z["d_I"]
        assert at(moved["indexer.kv_read"], kind) == (past + 1) // z["R_c"] * z["d_I"]
    assert at(moved["attn_hc.comb.weight"], kind) == 0


def test_bytes_of_a_decode_phase_are_its_steps_added_up():
    from costcalc.roofline import Precision

    precision = Precision()
    phase = calc.point(Query(SPEC, "decode_phase", Options("causal"), precision), batch=1, seq=5, new_tokens=30)
    steps = [calc.point(Query(SPEC, "decode", Options("causal"), precision), batch=1, context=t) for t in range(5, 34)]
    for key in ("kv_read_bytes", "kv_write_bytes", "total_bytes"):
        assert phase[key] == sum(r[key] for r in steps), key


# --- refusals ------------------------------------------------------------------------------------

def test_tiled_is_refused_in_one_line():
    with pytest.raises(CostcalcError) as err:
        Query(SPEC, "prefill", Options("tiled"))
    assert "\n" not in str(err.value) and "compressed" in str(err.value)


def test_under_causal_chunks_read_what_the_unchunked_prefill_reads():
    """Causal keys depend on the query's position alone: a schedule of chunks (each a cached prefill)
    reads what one prefill does; under full each chunk multiplies its own rectangle, so more or less."""
    rows = {r["phase"]: r for r in calc.chunked(SPEC, 64, 16)}
    pre = calc.prefill(SPEC, 64, 1, "causal")
    assert rows["total"]["attention_flops"] == pre["attention_flops"]
    assert rows["total"]["indexer_flops"] == pre["indexer_flops"]
    full = {r["phase"]: r for r in calc.chunked(SPEC, 64, 16, convention="full")}
    assert full["total"]["attention_flops"] != calc.prefill(SPEC, 64, 1, "full")["attention_flops"]


# --- memory --------------------------------------------------------------------------------------

@pytest.mark.parametrize("context", [1, 3, 4, 8, 15, 16, 17, 100, 1000])
def test_memory_holds_the_window_and_one_entry_per_r_c_tokens(context):
    """Per layer: min(T, W) window keys of d_h, floor(T / R_c) entries of d_h (and a csa layer's index
    keys of d_I), in the KV dtype (bf16: 2 bytes); whatever --window-cache says."""
    from costcalc.devices import load as device
    from costcalc.memory import fit
    from costcalc.roofline import Machine, Precision

    elements = 0
    for kind, z in GROUPS.items():
        elements += min(context, z["W"]) * z["d_h"]
        if kind != "swa":
            elements += context // z["R_c"] * (z["d_h"] + (z["d_I"] if kind == "csa" else 0))
    for cache in ("rolling", "whole"):
        query = Query(SPEC, "decode", Options(window_cache=cache), Precision(), Machine(device("h200")))
        assert fit(query, 3, context)["kv_cache_bytes"] == 3 * elements * 2


def test_the_cli_refuses_tiled_and_crossover_in_one_line(capsys):
    from cli_run import one_error

    code, _, err = run(capsys, "prefill", "--preset-file", str(PRESET), "--seq", "1k", "--convention", "tiled")
    assert code == 2 and one_error(err, "compressed entries are not key tiles")
    code, _, err = run(capsys, "crossover", "--preset-file", str(PRESET))
    assert code == 2 and one_error(err, "DeepSeek-V4")


def test_crossover_verify_and_the_peers_refuse_v4_by_name():
    from costcalc.peers.base import KINDS, features
    from costcalc.verify.run import verify

    for call in (lambda: calc.crossover(SPEC), lambda: verify(SPEC, show_progress=False)):
        with pytest.raises(CostcalcError) as err:
            call()
        assert "\n" not in str(err.value) and "DeepSeek-V4" in str(err.value)
    assert {k for g in SPEC.groups for k in features(g.block)} == {"swa", "csa", "hca"} <= set(KINDS)


def test_a_figure_draws_without_crossover_markers(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from costcalc.plot import _markers

    assert _markers(SPEC, "prefill", "causal", [64, 128], 1) == []
    out = tmp_path / "v4.png"
    assert run(capsys, "plot", "prefill", "--preset-file", str(PRESET), "--seq", "64:256:x2", "-o", str(out))[0] == 0
    assert out.stat().st_size > 0
