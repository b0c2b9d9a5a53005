"""Linear-attention and state-space mixers in the core (costcalc/core/mixers.py): what their counts
must satisfy whatever the sizes -- a fixed cost per token under the recurrence, whole chunks under
the chunked path, a state that does not grow with the context -- and how they reach the rows."""
import pytest

from costcalc import presets, symbols as s
from costcalc.blocks import MIXERS, parse
from costcalc.errors import CostcalcError
from costcalc.evaluate import Options, Query
from costcalc.memory import fit
from costcalc.roofline import Machine, Precision
from costcalc.devices import load as device
from costcalc.spec import from_dict
from named import traffic, workloads

SIZES = dict(L=3, d=64, d_c=64, V=100, h_q=4, h_kv=2, d_h=16, d_q=64, d_kv=32, m=96, E=4, k=2, m_e=32,
             h_lk=2, h_lv=4, d_lk=8, d_lv=12, h_m=8, d_m=16, G=2, N_s=16, d_in=128, r_dt=4, K_c=4, Q_c=32)
BLOCKS = [f"{m}.dense" for m in MIXERS] + ["gqa+mamba2.dense", "mamba2.none", "none.moe", "gqa-gated.moe"]


def at(expr, **values):
    point = {getattr(s, k): v for k, v in {**SIZES, "B": 1, **values}.items()}
    return int(expr.xreplace(point).doit())


def op(breakdown, name, **values):
    return at(breakdown.operators[name], **values) if name in breakdown.operators else 0


@pytest.mark.parametrize("mixer", MIXERS)
def test_the_recurrence_costs_the_same_per_token_at_any_context(mixer):
    block = f"{mixer}.dense"
    step = workloads.decode(block, "causal")
    for name in ("scan", "conv"):
        one = op(step, name, T=1)
        assert one == op(step, name, T=100_000), name             # flat in the context
        assert op(workloads.prefill(block, "causal"), name, S=77) == 77 * one
        assert op(workloads.cached_prefill(block, "causal"), name, T=5, C=9) == 9 * one


@pytest.mark.parametrize("mixer", ["gdn", "kda", "mamba2"])
def test_the_chunked_path_charges_whole_chunks(mixer):
    """Within a chunk the scan does not grow (the last chunk is padded); one token more than a
    chunk costs a second one."""
    pre = workloads.prefill(f"{mixer}.dense", "full")
    q = SIZES["Q_c"]
    assert op(pre, "scan", S=1) == op(pre, "scan", S=q) < op(pre, "scan", S=q + 1) == op(pre, "scan", S=2 * q)
    # a 4-token chunk over a cache costs what a whole chunk of Q_c costs over it
    chunk = workloads.cached_prefill(f"{mixer}.dense", "full")
    assert op(chunk, "scan", T=100, C=4) == op(chunk, "scan", T=100, C=q)


def test_mamba2_passes_states_between_chunks_quadratically_in_their_count():
    """n chunks cost n times a chunk plus (n + 1)^2 state passes of d_m x N_s per head: the
    second difference in n is constant, two passes."""
    pre = workloads.prefill("mamba2.dense", "full")
    f = [op(pre, "scan", S=n * SIZES["Q_c"]) for n in range(1, 6)]
    second = {f[i + 1] - 2 * f[i] + f[i - 1] for i in range(1, 4)}
    assert second == {2 * 2 * SIZES["L"] * SIZES["h_m"] * SIZES["d_m"] * SIZES["N_s"]}


def test_a_single_token_over_a_cache_takes_the_step_and_a_prompt_of_one_the_chunk():
    """transformers' Gated DeltaNet steps (no matrix product) only where a state is cached."""
    chunk = workloads.cached_prefill("gdn.dense", "full")
    assert op(chunk, "scan", T=7, C=1) == 0 == op(workloads.decode("gdn.dense", "full"), "scan", T=7)
    assert op(chunk, "scan", T=0, C=1) == op(workloads.prefill("gdn.dense", "full"), "scan", S=1) > 0


@pytest.mark.parametrize("past, new, outputs", [(0, 10, 10 + 4 - 1), (7, 1, 2), (7, 5, 5 + 2 * 4 - 1), (0, 1, 4)])
def test_the_convolution_computes_the_outputs_transformers_pads_for(past, new, outputs):
    chunk = workloads.cached_prefill("shortconv.dense", "full")
    assert op(chunk, "conv", T=past, C=new) == SIZES["L"] * SIZES["d"] * 2 * SIZES["K_c"] * outputs


@pytest.mark.parametrize("block", BLOCKS)
def test_a_decode_phase_is_its_steps_added_up(block):
    phase, step = workloads.decode_phase(block, "full"), workloads.decode(block, "full")
    S, N = 20, 6
    for name in phase.operators:
        assert op(phase, name, S=S, N=N) == sum(op(step, name, T=S + j - 1) for j in range(1, N)), name


@pytest.mark.parametrize("block", BLOCKS)
def test_the_state_is_read_only_when_a_token_is_cached(block):
    moved = traffic.build("cached_prefill", block, "causal")
    for key in [k for k in moved if k.endswith(".state_read") or k.startswith("conv.kv_read")]:
        assert at(moved[key], T=0, C=5) == 0
        assert at(moved[key], T=3, C=5) == at(moved[key], T=3000, C=5) > 0


def spec(layers, **extra):
    used = {k for g in layers for k in parse(g["arch"]).sizes()} | {"d", "V"}
    sizes = {k: v for k, v in SIZES.items() if k in used}
    return from_dict({"name": "t", **sizes, "layers": layers, **extra}, "test")


def test_memory_holds_a_state_per_sequence_and_kv_for_attention_layers_only():
    hybrid = spec([{"count": 3, "arch": "gdn.dense"}, {"count": 1, "arch": "gqa.dense"}], state_dtype="fp32")
    pure = spec([{"count": 4, "arch": "mamba2.none"}])
    h200 = Machine(device("h200"))
    rows = {t: fit(Query(hybrid, "decode", Options(), Precision(), h200), 2, t) for t in (10, 1000)}
    per_token = 2 * SIZES["h_kv"] * SIZES["d_h"] * 2                  # K and V of the one attention layer, bf16
    assert rows[1000]["kv_cache_bytes"] - rows[10]["kv_cache_bytes"] == 2 * 990 * per_token
    state = 3 * (SIZES["h_lv"] * SIZES["d_lk"] * SIZES["d_lv"] * 4   # fp32 recurrent state
                 + (2 * SIZES["h_lk"] * SIZES["d_lk"] + SIZES["h_lv"] * SIZES["d_lv"]) * (SIZES["K_c"] - 1) * 2)
    assert rows[10]["state_bytes"] == rows[1000]["state_bytes"] == 2 * state
    assert rows[10]["state_dtype"] == "fp32"
    wide = fit(Query(hybrid, "decode", Options(), Precision(state="bf16"), h200), 2, 10)
    assert wide["state_bytes"] < rows[10]["state_bytes"]
    flat = fit(Query(pure, "decode", Options(), Precision(), h200), 1, 10)
    assert flat["kv_cache_bytes"] == 0 and flat["max_context"] == "unbounded"


def test_a_model_without_softmax_attention_never_crosses_over():
    from costcalc.crossover import crossover

    rows = crossover(spec([{"count": 4, "arch": "mamba2.none"}]))
    assert {r["exact"] for r in rows} == {"never"}
    assert rows[0]["formula"].startswith("never")


def test_rows_say_which_scan_they_count():
    hybrid = spec([{"count": 2, "arch": "kda.dense"}, {"count": 1, "arch": "gqa.dense"}])
    assert Query(hybrid, "prefill", Options("causal")).labels()["scan"] == "recurrent"
    assert Query(hybrid, "prefill", Options("full")).labels()["scan"] == "chunked"
    assert "scan" not in Query(spec([{"count": 2, "arch": "gqa.dense"}]), "prefill").labels()


@pytest.mark.parametrize("key", ["gdn.moe_shared_gate", "gqa-gated.moe", "gqa+mamba2.dense", "mamba2.none",
                                 "none.moe_shared", "window-gated-rolling.dense", "lightning.moe"])
def test_block_keys_read_back(key):
    assert parse(key).key == key


@pytest.mark.parametrize("key, told", [("mla-gated.dense", "output gate"), ("gdn+mamba2.dense", "beside"),
                                       ("none.none", "needs a mixer or an FFN"), ("gqa+gqa.dense", "beside")])
def test_blocks_that_do_not_exist_are_refused(key, told):
    with pytest.raises(ValueError, match=told):
        parse(key)


@pytest.mark.parametrize("change, told", [({"h_lk": 3}, "h_lv=4 is not divisible by h_lk=3"),
                                          ({"state_dtype": "fp7"}, "state_dtype"),
                                          ({"G": 3}, "h_m=8 is not divisible by G=3")])
def test_sizes_that_cannot_hold_are_refused(change, told):
    layers = [{"count": 1, "arch": "gdn.dense"}, {"count": 1, "arch": "mamba2.none"}]
    with pytest.raises(CostcalcError, match=told):
        spec(layers, **change)


def test_a_state_dtype_needs_a_state():
    with pytest.raises(CostcalcError, match="state_dtype' applies to models whose layers keep a recurrent state"):
        spec([{"count": 1, "arch": "gqa.dense"}], state_dtype="fp32")


def test_gated_attention_doubles_the_query_projection_only():
    plain, gated = workloads.prefill("gqa.dense", "causal"), workloads.prefill("gqa-gated.dense", "causal")
    assert op(gated, "q_proj", S=9) == 2 * op(plain, "q_proj", S=9)
    assert all(op(gated, n, S=9) == op(plain, n, S=9) for n in plain.operators if n != "q_proj")


def test_a_parallel_block_costs_its_attention_and_its_mixer():
    both = workloads.prefill("gqa+mamba2.none", "full")
    attention, mixer = workloads.prefill("gqa.none", "full"), workloads.prefill("mamba2.none", "full")
    for name in both.operators:
        expected = op(attention, name, S=50) + op(mixer, name, S=50) - (op(mixer, name, S=50) if name == "lm_head" else 0)
        assert op(both, name, S=50) == expected, name


def test_megatron_counts_a_hybrid_by_its_constants_and_the_others_say_why_not():
    """Megatron-LM's hybrid count, written here from its gdn_layer_flops / mamba_layer_flops
    (per token, forward x 3): the difference from costcalc is named and adds up (``reconcile``)."""
    from costcalc.peers import compare
    from costcalc.peers.base import Case

    model = spec([{"count": 2, "arch": "gdn.dense"}, {"count": 1, "arch": "gqa-gated.dense"},
                  {"count": 2, "arch": "mamba2.none"}])
    z, seq = SIZES, 256
    d, qk, v = z["d"], z["h_lk"] * z["d_lk"], z["h_lv"] * z["d_lv"]
    gdn = d * (2 * qk + 2 * v + 2 * z["h_lv"]) + z["K_c"] * (2 * qk + v) + z["h_lv"] * z["d_lv"] ** 2 * 4 + d * v
    mamba = 2 * d * (2 * 2 * d + 2 * z["G"] * z["N_s"] + z["h_m"]) + 7 * 2 * d * z["N_s"] + 2 * 2 * d * d
    dq, dkv = z["h_q"] * z["d_h"], z["h_kv"] * z["d_h"]
    attention = 2 * (d * (2 * dq + 2 * dkv) + dq * seq / 2 * 2 + dq * d)
    mlp = 2 * 3 * d * z["m"]
    per_token = 3 * (2 * (2 * gdn + mlp) + attention + mlp + 2 * mamba) + 6 * d * 128   # V = 100 pads to 128
    rows = {r["tool"]: r for r in compare(Case(model, "train", seq=seq))}
    assert rows["megatron"]["flops"] == seq * per_token
    names = [t["term"] for t in rows["megatron"]["differences"]]
    assert any(n.startswith("scan by constants") for n in names)
    assert "Gated DeltaNet layers" in rows["torch-flopcounter"]["note"]


def test_the_command_line_takes_a_state_dtype_and_says_when_it_does_nothing(capsys, tmp_path):
    import json

    from cli_run import run

    model = spec([{"count": 2, "arch": "gdn.dense"}, {"count": 1, "arch": "gqa.dense"}], state_dtype="fp32")
    path = tmp_path / "hybrid.json"
    path.write_text(json.dumps(model.to_dict()))
    rows = {}
    for dtype in ("fp32", "bf16"):
        code, out, err = run(capsys, "memory", "--preset-file", str(path), "-b", "2", "-t", "1k", "--device", "h200",
                             "--state-dtype", dtype, "-f", "json")
        assert code == 0 and err == "", err
        rows[dtype] = json.loads(out)[0]
    assert rows["fp32"]["state_dtype"] == "fp32" and rows["bf16"]["state_dtype"] == "bf16"
    assert rows["fp32"]["kv_cache_bytes"] == rows["bf16"]["kv_cache_bytes"]
    recurrent = 2 * 2 * SIZES["h_lv"] * SIZES["d_lk"] * SIZES["d_lv"]   # 2 layers x 2 sequences
    assert rows["fp32"]["state_bytes"] - rows["bf16"]["state_bytes"] == recurrent * 2
    code, out, err = run(capsys, "decode", "-p", "llama-3.1-8b", "-t", "1k", "--state-dtype", "fp32", "-f", "json")
    assert code == 0 and "--state-dtype does nothing: llama-3.1-8b keeps no recurrent state" in err
    code, out, err = run(capsys, "decode", "--preset-file", str(path), "-t", "1k", "--device", "h200", "-f", "json")
    row = json.loads(out)[0]
    assert row["scan"] == "recurrent" and row["state_read_bytes"] == 2 * SIZES["h_lv"] * SIZES["d_lk"] * SIZES["d_lv"] * 4


def test_a_short_convolution_keeps_no_state_to_type(capsys, tmp_path):
    """LFM2's mixer keeps only its convolution window (KV dtype): no state dtype in its rows, and
    --state-dtype says it does nothing."""
    import json

    from cli_run import run

    model = spec([{"count": 2, "arch": "shortconv.dense"}, {"count": 1, "arch": "gqa.dense"}])
    path = tmp_path / "conv.json"
    path.write_text(json.dumps(model.to_dict()))
    code, out, err = run(capsys, "decode", "--preset-file", str(path), "-t", "1k", "--device", "h200",
                         "--state-dtype", "fp32", "-f", "json")
    row = json.loads(out)[0]
    assert code == 0 and "--state-dtype does nothing" in err
    assert "state_dtype" not in row and "state_read_bytes" not in row and row["scan"] == "recurrent"
    with pytest.raises(CostcalcError, match="keep a recurrent state"):
        spec([{"count": 1, "arch": "shortconv.dense"}], state_dtype="fp32")


HYBRID_PRESETS = sorted(name for name in presets.names() if presets.load(name).has_mixers)


@pytest.mark.parametrize("name", HYBRID_PRESETS)
def test_every_hybrid_preset_is_compared_without_a_failure(name):
    """Every tool answers a hybrid preset's training step and prefill, its differences adding up,
    or says in its row why it cannot (a mixer it does not model): no assertion, no traceback."""
    from costcalc.peers import compare
    from costcalc.peers.base import Case

    spec = presets.load(name)
    for workload in ("train", "prefill"):
        rows = compare(Case(spec, workload, seq=256))
        assert rows and all(r["flops"] is not None or r["note"] for r in rows), name
    megatron = next(r for r in compare(Case(spec, "train", seq=256), ["megatron"]))
    assert megatron["flops"] is not None or "not modelled" in megatron["note"]


def test_a_plot_of_a_model_without_softmax_attention_says_why_it_never_crosses(capsys, tmp_path):
    from cli_run import run

    code, _, err = run(capsys, "plot", "decode", "-p", "mamba-2.8b-hf", "-t", "1k:8k:x2", "-o", str(tmp_path / "p.png"))
    assert code == 0 and "T_equal: never (no softmax attention)" in err
