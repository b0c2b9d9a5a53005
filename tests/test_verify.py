"""verify/: the torch decoder executes exactly what the core's formulas say (CPU)."""
import json
import os
import re
from pathlib import Path

import pytest

import torch

from costcalc import presets
from costcalc.cli import main
from cli_run import one_error
from costcalc.spec import from_dict
from costcalc.core import linear
from costcalc.verify import build, jobs, toy
from costcalc.verify.counting import tiled_area
from costcalc.verify.run import verify


def test_toy_reproduces_the_tutorial_table():
    got = toy.work_counts(build.toy(), presets.load("toy"))
    for key, value in toy.PUBLISHED.items():
        assert got[key] == value, key
    assert got["tokens_recompute"] == toy.PUBLISHED["tokens"]


@pytest.mark.parametrize("spec", [       # small-dense (GQA beside toy's MHA) under `pytest -m slow`
    presets.load("toy"),
    pytest.param(from_dict({"name": "small-dense", "arch": "dense", "L": 2, "d": 48, "h_q": 6, "h_kv": 2, "d_h": 8,
                            "m": 40, "V": 37}, "small-dense"), marks=pytest.mark.slow),
    from_dict({"name": "small-moe", "arch": "moe", "L": 2, "d": 32, "h_q": 4, "h_kv": 1, "d_h": 12,
               "E": 6, "k": 2, "m_e": 20, "V": 29}, "small-moe"),
], ids=lambda s: s.name)
def test_every_workload_term_and_convention_is_exact(spec):
    outcome = verify(spec, device="cpu", seqs=(13, 40), batch=2, tile=(8, 4), repeats=0, show_progress=False)
    workloads = {r["workload"] for r in outcome.checks}
    assert workloads == {"prefill", "varlen_prefill", "cached_prefill", "chunked", "decode", "generate"}
    assert {r["detail"].split()[0] for r in outcome.checks if r["workload"] == "varlen_prefill"} == {"padded", "packed"}
    # every projection is checked by name, beside its term
    operators = {r["operator"] for r in outcome.checks if r["operator"]}
    assert {"q_proj", "k_proj", "v_proj", "o_proj", "lm_head"} <= operators
    assert ({"gate_proj", "up_proj", "down_proj"} if spec.arch == "dense" else
            {"router", "experts.gate_proj", "experts.up_proj", "experts.down_proj"}) <= operators
    assert {r["convention"] for r in outcome.checks if r["term"] == "attention"} == {"causal", "full", "tiled"}
    bad = [r for r in outcome.checks if not r["match"]]
    assert not bad, bad[:3]
    if spec.arch == "moe":
        assert {"router", "experts"} <= {r["term"] for r in outcome.checks}


STRUCTURES = [
    # sliding windows beside global layers (gpt-oss / Gemma pattern), MoE
    {"name": "small-hybrid-window", "d": 32, "V": 31, "h_q": 4, "h_kv": 2, "d_h": 8, "E": 4, "k": 2, "m_e": 16,
     "layers": [{"count": 1, "arch": "window.moe", "W": 5}, {"count": 1, "arch": "gqa.moe"}]},
    # MLA with Q LoRA, a dense first layer, then shared experts (DeepSeek pattern)
    {"name": "small-mla", "d": 32, "V": 29, "h_q": 4, "r_q": 12, "r_kv": 10, "d_nope": 6, "d_rope": 4, "d_v": 5,
     "layers": [{"count": 1, "arch": "mla_q.dense", "m": 24},
                {"count": 1, "arch": "mla_q.moe_shared", "E": 4, "k": 2, "m_e": 8, "E_s": 2, "m_s": 8}]},
    # MLA without Q LoRA; Qwen2-MoE style shared expert with its own width and gate; a window
    {"name": "small-mixed", "d": 24, "V": 23,
     "layers": [{"count": 1, "arch": "mla.dense", "h_q": 2, "r_kv": 6, "d_nope": 4, "d_rope": 2, "d_v": 3, "m": 20},
                {"count": 1, "arch": "window.moe_shared_gate", "h_q": 4, "h_kv": 1, "d_h": 6, "W": 3,
                 "E": 5, "k": 2, "m_e": 8, "E_s": 1, "m_s": 20}]},
    # chunked attention (Llama 4 pattern: a chunked MoE layer with a shared expert of the expert width, a
    # global dense one of another width) and a non-gated MLP (GPT-NeoX, StarCoder2, Apertus)
    {"name": "small-chunk-mlp", "d": 32, "V": 27, "h_q": 4, "h_kv": 2, "d_h": 8,
     "layers": [{"count": 1, "arch": "chunk.moe_shared", "W_c": 7, "E": 4, "k": 1, "m_e": 8, "E_s": 1, "m_s": 8},
                {"count": 1, "arch": "gqa.dense", "m": 40},
                {"count": 1, "arch": "chunk.mlp", "W_c": 4, "m": 24}]},
    # Gemma 4's full layers: values are their keys (no v_proj), experts beside the MLP; and a DeciLM
    # (Nemotron NAS) layer without attention
    {"name": "small-keqv-nas", "d": 32, "V": 27,
     "layers": [{"count": 1, "arch": "gqa-keqv.moe_shared", "h_q": 4, "h_kv": 1, "d_h": 12, "E": 4, "k": 2,
                 "m_e": 8, "E_s": 1, "m_s": 24},
                {"count": 1, "arch": "none.dense", "m": 40}]},
]


# In CI one length (11: past every window and chunk, several 4 x 8 tiles); under `pytest -m slow` two.
STRUCTURE_SEQS = [pytest.param((11,), id="11"), pytest.param((11, 30), id="11+30", marks=pytest.mark.slow)]


# In CI the MLA and the mixed structures; the other three (each also held by its own feature tests:
# test_chunk_mlp.py, test_structures.py, test_hf_gemma4.py) under `pytest -m slow`.
FAST_STRUCTURES = ("small-mla", "small-mixed")


@pytest.mark.parametrize("seqs", STRUCTURE_SEQS)
@pytest.mark.parametrize("data", [pytest.param(d, id=d["name"], marks=() if d["name"] in FAST_STRUCTURES
                                               else pytest.mark.slow) for d in STRUCTURES])
def test_real_structures_are_exact_too(data, seqs):
    spec = from_dict(data, data["name"])
    outcome = verify(spec, device="cpu", dtype="float64", seqs=seqs, batch=2, tile=(4, 8), repeats=0,
                     show_progress=False)
    bad = [r for r in outcome.checks if not r["match"]]
    assert not bad, bad[:3]
    terms = {r["term"] for r in outcome.checks}
    assert {"attn_proj", "attention", "lm_head"} <= terms
    if "shared" in json.dumps(data):
        assert "shared_experts" in terms
    assert any("within tolerance" in line for line in outcome.extras)


@pytest.mark.parametrize("mla", [pytest.param("naive", marks=pytest.mark.slow),
                                 pytest.param("absorbed", marks=pytest.mark.slow), "expanded"])
def test_mla_forms_forced_everywhere_are_exact(mla):
    """Every workload under one MLA form forced (CI: expanded, the one no default runs; the
    structures above run naive prefills and absorbed decode steps under auto)."""
    spec = from_dict(STRUCTURES[2], "mixed")
    outcome = verify(spec, device="cpu", dtype="float64", seqs=(9,), batch=1, tile=(4, 4), repeats=0,
                     show_progress=False, mla=mla)
    assert outcome.ok and len(outcome.checks) > 50


def test_mla_expanded_re_expands_the_cache_and_is_counted_exactly():
    """Expanded caches only the latent and runs kv_b_proj over every cached latent each step:
    counted, that is naive + the re-expansion (costcalc's identity)."""
    spec = from_dict(STRUCTURES[1], "mla")
    runs = {form: verify(spec, device="cpu", dtype="float64", seqs=(10,), batch=2, tile=(4, 4), repeats=0,
                         show_progress=False, mla=form, workloads=("decode",))
            for form in ("naive", "expanded")}
    assert all(run.ok for run in runs.values())

    def counted(run):
        return next(r["counted_flops"] for r in run.checks if r["term"] == "attn_proj")

    up = 2 * 2 * 2 * 10 * 10 * 4 * (6 + 5)     # 2 FLOPs x B=2 x 2 layers x T=10 cached latents x r_kv x h (d_nope + d_v)
    assert counted(runs["expanded"]) - counted(runs["naive"]) == up


def test_a_rolling_window_cache_is_counted_exactly_and_rolls():
    spec = from_dict(STRUCTURES[0], "window")
    runs = {cache: verify(spec, device="cpu", dtype="float64", seqs=(12,), batch=1, tile=(4, 4), repeats=0,
                          show_progress=False, window_cache=cache, workloads=("cached_prefill", "decode", "generate"))
            for cache in ("whole", "rolling")}
    assert all(run.ok for run in runs.values())
    assert any("within tolerance" in line for line in runs["rolling"].extras)    # cached = recomputed

    def attention(run, workload, convention):
        return next(r["counted_flops"] for r in run.checks
                    if r["workload"] == workload and r["term"] == "attention" and r["convention"] == convention)

    # the window layer (W=5) holds 4 keys: a step multiplies 5, what causal counts; whole: 13
    assert attention(runs["rolling"], "decode", "full") == attention(runs["rolling"], "decode", "causal")
    assert attention(runs["whole"], "decode", "full") - attention(runs["rolling"], "decode", "full") == 4 * 8 * 4 * (13 - 5)
    assert attention(runs["rolling"], "cached_prefill", "tiled") == attention(runs["whole"], "cached_prefill", "tiled")


DSA = from_dict(json.loads((Path(__file__).parent / "data" / "dsa-tiny.json").read_text()), "dsa-tiny")


def _sparse_rows(outcome, term):
    return {(r["workload"], r["convention"]): r for r in outcome.checks if r["term"] == term and not r["operator"]}


def test_sparse_attention_is_counted_exactly_under_both_conventions():
    """The torch indexer (wq_b, wk, weights_proj; scores of every key, top-k) and the MLA over the keys
    it selects: the causal convention counts the sparse kernel's work (the indexer over the legal pairs,
    attention over min(p, k_I) keys), full what transformers executes (both over the whole rectangle)."""
    outcome = verify(DSA, device="cpu", dtype="float64", seqs=(9,), batch=2, repeats=0, show_progress=False,
                     workloads=("prefill", "decode", "cached_prefill"))
    bad = [r for r in outcome.checks if not r["match"]]
    assert not bad, bad[:3]
    assert {"indexer.wq_b", "indexer.wk", "indexer.weights_proj", "q_a_proj"} <= {r["operator"] for r in outcome.checks}
    index, attention = _sparse_rows(outcome, "indexer"), _sparse_rows(outcome, "attention")
    assert {conv for _, conv in index} == {conv for _, conv in attention} == {"causal", "full"}   # tiled: refused
    # S = 9 > k_I = 5: the selection reads fewer keys than the legal ones, which are fewer than the rectangle
    assert attention["prefill", "causal"]["counted_flops"] < attention["prefill", "full"]["counted_flops"]
    assert index["prefill", "causal"]["counted_flops"] < index["prefill", "full"]["counted_flops"]
    assert index["decode", "causal"]["counted_flops"] == index["decode", "full"]["counted_flops"]   # T + 1 keys


@pytest.mark.slow   # every workload, three MLA forms: about 40 s of CPU
@pytest.mark.parametrize("mla", ["auto", "naive", "expanded"])
def test_sparse_attention_every_workload_and_form(mla):
    outcome = verify(DSA, device="cpu", dtype="float64", seqs=(11, 30), batch=2, repeats=0, show_progress=False,
                     mla=mla)
    assert outcome.ok and {r["workload"] for r in outcome.checks} == {
        "prefill", "varlen_prefill", "cached_prefill", "chunked", "decode", "generate"}
    assert any("within tolerance" in line for line in outcome.extras)       # cached = recomputed, top-k included


def test_the_indexer_selects_its_top_k_of_the_legal_keys():
    model = build.from_spec(DSA, dtype=torch.float64)
    from costcalc.verify.model import causal_mask

    attn = model.layers[0].attn
    x = torch.randn(2, 9, DSA["d"], dtype=torch.float64)
    q_lat = attn.q_a_norm(attn.q_a_proj(x))
    chosen = attn.indexer(x, q_lat, torch.arange(9), causal_mask(9), None)          # [B, 1, C, K]
    per_query = chosen.sum(-1)[0, 0]
    assert per_query.tolist() == [min(p, DSA["k_I"]) for p in range(1, 10)]
    assert not (chosen & ~causal_mask(9)).any()                                       # never a future key


def test_mla_absorbed_and_naive_compute_the_same_function():
    spec = from_dict(STRUCTURES[1], "mla")
    model = build.from_spec(spec, dtype=torch.float64)
    from costcalc.verify.model import causal_mask

    tokens = torch.randint(0, spec["V"], (2, 9))
    with torch.no_grad():
        naive = model(tokens, causal_mask(9), logits="all", form="naive")
        absorbed = model(tokens, causal_mask(9), logits="all", form="absorbed")
    assert torch.allclose(naive, absorbed, atol=1e-10)


def test_a_window_mask_reads_w_keys():
    from costcalc.verify.model import band, causal_mask

    mask = band(causal_mask(4, past=6), past=6, window=3)
    assert mask.sum(-1).tolist() == [3, 3, 3, 3]
    assert mask[0].nonzero().flatten().tolist() == [4, 5, 6]


def test_a_chunk_mask_reads_the_own_chunk_up_to_itself():
    from costcalc.verify.model import band, causal_mask

    mask = band(causal_mask(5, past=6), past=6, window=None, chunk=4)   # positions 6..10 (0-based)
    assert mask.sum(-1).tolist() == [3, 4, 1, 2, 3]                    # (p mod 4) + 1
    assert mask[2].nonzero().flatten().tolist() == [8]                 # a chunk starts at 8


def test_tiled_area_matches_the_published_tile_counts():
    # docs/torch-counting.md: S=1000, D=64, H=2 -> tile 128: 288,129,024 FLOPs
    allowed = torch.ones(1000, 1000, dtype=torch.bool).tril()
    assert 4 * 64 * 2 * tiled_area(allowed, 128, 128) == 288_129_024
    assert 4 * 64 * 2 * int(allowed.sum()) == 256_256_000


def test_cli_verify_writes_a_report(tmp_path, capsys, monkeypatch):
    _fake_peak(monkeypatch)        # the report's files are the point here, not this machine's peak
    code = main(["verify", "--preset", "toy", "--device", "cpu", "--seq", "6", "--repeats", "1",
                 "--attention-lengths", "32", "--report", str(tmp_path / "rep"), "-f", "json",
                 "-o", str(tmp_path / "checks.json")])
    assert code == 0
    document = json.loads((tmp_path / "checks.json").read_text())   # one document: checks, timings, ...
    rows = document["checks"]
    assert rows and all(r["match"] for r in rows) and document["summary"]["mismatches"] == 0
    assert {"workload", "term", "convention", "formula_flops", "counted_flops", "ratio"} <= set(rows[0])
    report = (tmp_path / "rep" / "report.md").read_text()
    assert f"{len(rows)} checks, 0 mismatches" in report and "score pairs, cache" in report
    timings = (tmp_path / "rep" / "timings.csv").read_text()
    assert "time_s" in timings and "peak_fraction" in timings
    assert "measured_ratio" in (tmp_path / "rep" / "attention.csv").read_text()
    # every file written whole, moved into place: no temporary file is left beside them
    assert sorted(p.name for p in (tmp_path / "rep").iterdir()) == [
        "attention.csv", "checks.csv", "report.md", "timings.csv"]
    # a second run into the same folder with fewer sections leaves none of the first run's behind
    assert main(["verify", "--preset", "toy", "--device", "cpu", "--seq", "6", "--repeats", "0",
                 "--workloads", "decode", "--report", str(tmp_path / "rep"), "-o", str(tmp_path / "c.json")]) == 0
    assert sorted(p.name for p in (tmp_path / "rep").iterdir()) == ["checks.csv", "report.md"]
    assert "timings" not in (tmp_path / "rep" / "report.md").read_text().lower().split("files:")[1].split("\n")[0]


def test_verify_names_every_job():
    from costcalc.cli.verify_cmd import WORKLOADS
    from costcalc.verify.jobs import JOBS

    assert WORKLOADS.split(",") == list(JOBS)


@pytest.mark.parametrize("args, message", [
    (["--device", "tpu"], "unknown device 'tpu'"),
    (["--dtype", "int3"], "unknown dtype 'int3'"),
    (["--workloads", "prefill,bake"], "unknown workload 'bake'"),
    (["--report", ""], "--report: the path is empty"),
] + ([(["--device", "cuda"], "torch sees no CUDA device")] if not torch.cuda.is_available() else []))
def test_verify_bad_input(args, message, capsys):
    code = main(["verify", "--preset", "toy", "--repeats", "0", *args])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_verify_refuses_a_model_that_does_not_fit(capsys):
    code = main(["verify", "--preset", "llama-3.1-405b", "--device", "cpu", "--repeats", "0"])
    err = capsys.readouterr().err
    assert code == 2 and "GiB free" in err and len(err.strip().splitlines()) == 1


def test_gpu_check_script_parses_and_names_its_dry_presets():
    """The fast half of the script's check: bash reads it, and every preset file DRY=1 runs exists."""
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    script = root / "verify" / "gpu_check.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    named = re.findall(r"--preset-file (verify/dry/[\w.-]+\.json)", script.read_text())
    assert len(named) == 4 and all((root / p).is_file() for p in named)


@pytest.mark.slow   # six processes that each import torch: about 30 s of CPU
def test_gpu_check_script_logic_on_cpu(tmp_path):
    """The prepared GPU script, run DRY=1 on CPU on small presets with the real models'
    structures: every step must run and report exact matches, in seconds."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    script = root / "verify" / "gpu_check.sh"
    env = {**os.environ, "DRY": "1", "OUT": str(tmp_path), "PYTHONPATH": str(root),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    terms = {"dense": "ffn", "moe": "experts", "window": "experts", "mla": "shared_experts"}
    for part, term in terms.items():
        report = (tmp_path / part / "report.md").read_text()
        assert f"dry-{part}" in report and re.search(r"\b[1-9]\d* checks, 0 mismatches", report), part
        assert f",{term}," in (tmp_path / part / "checks.csv").read_text(), part
        assert "0 mismatches" in (tmp_path / f"{part}.log").read_text(), part
    assert "1 window.moe, 1 gqa.moe" in (tmp_path / "window" / "report.md").read_text()
    assert {"checks.csv", "timings.csv", "attention.csv"} <= {p.name for p in (tmp_path / "dense").iterdir()}
    assert (tmp_path / "dense-checks.csv").read_text().startswith("preset,workload,")
    # the roofline: step 1's timings predicted on the profile it measured, which it saved
    timings = (tmp_path / "dense" / "timings.csv").read_text()
    assert "predicted_time_s" in timings and "measured_over_predicted" in timings
    profile = json.loads((tmp_path / "measured-profile.json").read_text())
    assert profile["peak_flops"]["fp32"] > 0 and profile["mem_bw"] > 0
    big, mid = ((tmp_path / f"decode-batch-{b}.log").read_text() for b in (4, 2))
    assert "B=4 T=16" in big and "B=2 T=48" in mid and " 0 mismatches" in big and " 0 mismatches" in mid


# --- the command: defaults, one document, header and summary, outputs checked first ---------

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()
PRESETS = sorted(p.stem for p in (Path(__file__).resolve().parents[1] / "presets").glob("*.json"))
# One layer of 512 (or 32 wide) experts is over 21 GB in float32: these run in bfloat16.
HALF_PRESETS = {"minimax-text-01", "qwen3.5-397b-a17b", "minimax-m2.5", "qwen3-coder-480b-a35b-instruct"}
# One layer outgrows a 23 GiB machine even in bfloat16 (160 experts of 6144 x 2560: 14 GiB of weights, plus the
# run): where memory is short the run is refused in one line, which is then what is checked.
BIG_PRESETS = {"qwen3-coder-480b-a35b-instruct"}
# One-layer runs that take more than ~3 s of CPU on a 2-core machine (measured): run by
# `python -m pytest -m slow -n 0`, not by CI. Every preset runs in one or the other.
SLOW_PRESETS = {
    "deepseek-v3", "gemma-2-9b", "gemma-3-12b", "gpt-oss-120b", "gpt-oss-20b", "llama-2-70b",
    "llama-2-7b", "llama-3.1-405b", "llama-3.1-70b", "llama-3.1-8b", "mistral-7b-v0.1", "mixtral-8x7b",
    "olmoe-1b-7b", "qwen1.5-moe-a2.7b", "qwen2.5-72b", "qwen2.5-7b", "qwen3-235b-a22b", "qwen3-30b-a3b",
    "qwen3-8b",
    # the families added with transformers 5 (full-width layers, 3B parameters and up)
    "apertus-8b-2509", "c4ai-command-r-v01", "ernie-4.5-21b-a3b-pt", "exaone-4.0-32b", "gemma-7b", "glm-4-9b-0414",
    "glm-4.5-air", "granite-3.0-3b-a800m-base", "granite-3.1-8b-base", "llama-4-scout-17b-16e", "olmo-2-1124-7b",
    "olmo-3-1025-7b", "phi-3-mini-4k-instruct", "phi-3.5-moe-instruct", "pythia-6.9b", "seed-oss-36b-instruct",
    "smollm3-3b", "starcoder2-7b",
    # older attention + MLP decoders (1.6B parameters and up, LM heads of 50k-256k rows)
    "gpt-j-6b", "minitron-8b-base", "phi-2", "stablelm-2-1_6b",
    # the attention + SwiGLU families added later (each ran here at least as long as smollm3-3b)
    "ernie-4.5-0.3b-pt", "helium-1-2b", "ministral-8b-instruct-2410", "olmo-1b-0724-hf",
    # older attention + non-gated MLP decoders (1.1B parameters and up, LM heads of 49k-251k rows)
    "bloom-7b1", "gpt_bigcode-santacoder", "mpt-7b", "opt-6.7b",
    # attention + MLP decoders added later (7B parameters and up, LM heads of 128k-256k rows)
    "c4ai-command-r7b-12-2024", "glm-4-9b-chat-hf", "hunyuan-7b-instruct",
    # MoE families added later
    "dots-llm1-base", "hunyuan-a13b-instruct",
    # linear-attention and state-space hybrids (their mixers run in both scan forms)
    "ai21-jamba-1.5-mini", "falcon-h1-34b-base", "falcon-mamba-7b", "granite-4.0-h-small", "kimi-linear-48b-a3b",
    "lfm2-1.2b", "lfm2-8b-a1b", "mamba-2.8b-hf", "minimax-text-01", "nemotron-h-56b-base-8k",
    "nvidia-nemotron-3-nano-30b-a3b", "qwen3-next-80b-a3b", "qwen3.5-27b", "qwen3.5-35b-a3b", "qwen3.5-397b-a17b",
    # Gemma 4 and Llama-Nemotron NAS (full-width layers, LM heads of 128k-262k rows)
    "gemma-4-26b-a4b", "gemma-4-31b", "llama-3.3-nemotron-super-49b",
    # DeepSeek Sparse Attention (full-width MLA and indexer; one layer is a dense one)
    "deepseek-v3.2", "glm-5",
    # frontier MoE families of issue #19 (full-width layers; Kimi's first layer dense, the others' 128-256 experts)
    "kimi-k2-instruct", "kimi-k2.5", "minimax-m2.5", "qwen3-coder-480b-a35b-instruct", "qwen3-vl-235b-a22b-instruct",
    # GQA with values of their own width or per-head gates (full width: 25-30 s each here)
    "mimo-v2-flash", "step-3.7-flash",
    # MLA at its real width (the small MLA structures above hold the same code in the default run)
    "deepseek-v2-lite",
}


def _fake_peak(monkeypatch):
    """The measured peak and bandwidth (seconds of 2048^3 products, 256 MB copies) are not what
    these tests are about."""
    import costcalc.verify.roofline

    monkeypatch.setattr(costcalc.verify.roofline, "gemm_peak", lambda *a, **k: 1e12)
    monkeypatch.setattr(costcalc.verify.roofline, "memory_bandwidth", lambda *a, **k: 1e10)


def _nothing_built(monkeypatch):
    """Any attempt to build a decoder or run a workload fails the test."""
    import costcalc.verify.run

    def built(*a, **k):
        raise AssertionError("a decoder was built")

    monkeypatch.setattr(costcalc.verify.run, "verify", built)
    monkeypatch.setattr(build, "toy", built)
    monkeypatch.setattr(build, "from_spec", built)


def test_the_readme_verify_command_runs_as_written(capsys, monkeypatch):
    """`costcalc verify --preset toy --device cpu`, with every default (--seq 64: the chunk
    workload reads positions 64..79, past the tutorial's 64-row table); the measured peak and
    bandwidth faked (seconds of large products, and not what is checked here)."""
    _fake_peak(monkeypatch)
    line = next(l for l in README.splitlines() if l.startswith("costcalc verify --preset toy"))
    args = line.split("#")[0].split()[1:]
    assert args == ["verify", "--preset", "toy", "--device", "cpu"]
    code = main(args)
    out = capsys.readouterr().out
    assert code == 0
    lines = out.strip().splitlines()
    assert lines[0].startswith("toy, 2 layers, vocabulary 6 (the seed tutorial's weights) | cpu float64")
    assert re.fullmatch(r"[1-9]\d* checks, 0 mismatches", lines[-1])
    table = out[out.index("seed tutorial table"):]
    for label, value in (("generated tokens", "[3, 2, 0, 4]"), ("projected rows, recompute", "44"),
                         ("projected rows, cache", "14"), ("score pairs, recompute", "296"),
                         ("score pairs, cache", "112")):
        row = next(l for l in table.splitlines() if label in l)
        assert row.count(value) == 2 and row.rstrip().endswith("ok"), row
    assert "cached_prefill" in out and "B=1 C=16 T=64" in out and "time" in out
    assert max(map(len, lines)) <= 80 and "counted" not in out[out.find("left out"):]   # the checks stay whole
    assert out.count("formula      counted") == 7        # a checks table per job (varlen: packed, padded)


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_PRESETS else n
                                  for n in PRESETS])
def test_every_preset_runs_the_verify_defaults(name, capsys):
    """Default --seq and workloads, one layer, a vocabulary of 64, counting only (in bfloat16 where
    one layer's experts outgrow this machine's memory in float32)."""
    spec = presets.load(name)
    half = ["--dtype", "bfloat16"] if name in HALF_PRESETS else []
    code = main(["verify", "--preset", name, "--device", "cpu", "--layers", "1", "--vocab", "64",
                 "--repeats", "0", "-f", "json", *half])
    out, err = capsys.readouterr()
    if any(g.block.v4 for g in spec.groups):         # no torch model of DeepSeek-V4's layers yet: one line
        assert code == 2 and one_error(err, "DeepSeek-V4 layers") and out == ""
        return
    if name in BIG_PRESETS and code == 2:
        assert one_error(err, "GiB free; use --layers, --vocab or shorter --seq") and out == ""
        return
    assert code == 0
    doc = json.loads(out)                       # one JSON document
    assert set(doc) == {"checks", "timings", "attention", "notes", "summary"}
    assert doc["summary"] == {"checks": len(doc["checks"]), "mismatches": 0} and len(doc["checks"]) >= 70
    assert {r["workload"] for r in doc["checks"]} == {
        "prefill", "varlen_prefill", "cached_prefill", "chunked", "decode", "generate"}
    vocab = "vocabulary 64 of" if spec["V"] > 64 else "vocabulary 64 (the model's:"
    assert doc["notes"][0].startswith(f"{name}, 1 of {spec['L']} layers, {vocab}")


def test_seed_toy_beyond_its_64_positions(capsys):
    code = main(["verify", "--preset", "toy", "--device", "cpu", "--seq", "100", "--repeats", "0",
                 "--workloads", "chunk,decode"])
    out = capsys.readouterr().out
    assert code == 0 and "B=1 C=25 T=100" in out and "B=1 T=100" in out
    assert out.count("  ok") == 5 and "MISMATCH" not in out


def test_toy_positions_past_the_published_table_leave_the_published_weights():
    published, grown = build.toy(), build.toy(positions=200)
    assert grown.position.weight.shape[0] == 200
    for (name, a), (_, b) in zip(published.named_parameters(), grown.named_parameters()):
        rows = a.shape[0] if name == "position.weight" else None
        assert torch.equal(a, b[:rows] if rows else b), name
    extra = grown.position.weight[64:]
    assert torch.equal(extra, build.toy(positions=200).position.weight[64:])       # seeded
    assert extra.abs().max() <= 0.2 and len({tuple(r.tolist()) for r in extra}) == 136
    got = toy.work_counts(grown, presets.load("toy"))
    assert all(got[key] == value for key, value in toy.PUBLISHED.items())


def test_a_length_the_machine_cannot_hold_is_refused_before_anything_is_built(monkeypatch, capsys):
    monkeypatch.setattr(build, "toy", lambda *a, **k: pytest.fail("a decoder was built"))
    monkeypatch.setattr(build, "from_spec", lambda *a, **k: pytest.fail("a decoder was built"))
    code = main(["verify", "--preset", "toy", "--device", "cpu", "--seq", "1M", "--repeats", "0"])
    err = _one_error_line(capsys)
    assert code == 2 and "GiB free" in err and "cached_prefill B=1 C=262144 T=1048576" in err and "use --layers" in err


def test_csv_and_markdown_hold_the_checks_and_say_where_the_rest_is(monkeypatch, capsys):
    _fake_peak(monkeypatch)
    for fmt in ("csv", "markdown"):
        code = main(["verify", "--preset", "toy", "--device", "cpu", "--seq", "6", "--workloads", "prefill",
                     "--attention-lengths", "16", "-f", fmt])
        captured = capsys.readouterr()
        assert code == 0
        columns = captured.out if fmt == "csv" else next(l for l in captured.out.splitlines() if l.startswith("| "))
        assert ("formula_flops" if fmt == "csv" else "| formula |") in columns and "time" not in columns
        assert "measured_ratio" not in captured.out
        note = [l for l in captured.err.splitlines() if l.startswith("note:")]
        assert len(note) == 1 and "timings and attention" in note[0] and "-f json" in note[0]
        # the prefill's 7 terms, 2 more conventions of attention, and its 9 linear operators by name
        assert re.search(r"^18 checks, 0 mismatches$", captured.err, re.M)


def test_the_table_has_a_header_that_says_what_was_cut_and_a_summary_last(capsys):
    args = ["verify", "--preset", "toy", "--device", "cpu", "--seq", "6", "--repeats", "0", "--layers", "1",
            "--workloads", "prefill,decode"]
    assert main(args) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert main(args + ["-f", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert lines[0] == doc["notes"][0] == "toy, 1 of 2 layers, vocabulary 6 | cpu float32"
    assert lines[-1] == f"{len(doc['checks'])} checks, 0 mismatches"


def test_the_header_names_the_groups_kept():
    from costcalc.verify.run import cut, title

    spec = from_dict(STRUCTURES[0], "hybrid")
    spec = from_dict({**spec.to_dict(), "layers": [{**g, "count": 3} for g in spec.to_dict()["layers"]]}, "x")
    kept = cut(spec, 2, 16)
    line = title(spec, kept, False, torch.device("cpu"), torch.float32)
    assert line == ("small-hybrid-window, 2 of 6 layers (1 window.moe, 1 gqa.moe), vocabulary 16 of 31 "
                    "| cpu float32")


def test_more_layers_than_the_model_has_is_an_error(capsys):
    code = main(["verify", "--preset", "toy", "--layers", "99", "--repeats", "0"])
    err = capsys.readouterr().err
    assert code == 2 and err.strip() == "error: --layers 99: toy has 2 layers"
    from costcalc.errors import CostcalcError

    with pytest.raises(CostcalcError, match="2 layers"):
        presets.load("toy").with_sizes(L=99)
    with pytest.raises(CostcalcError, match="24 layers"):
        presets.load("gpt-oss-20b").with_sizes(L=25)
    assert presets.load("gpt-oss-20b").with_sizes(L=24)["L"] == 24


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: "), err
    return err


@pytest.mark.parametrize("where", ["under a file", "a file", "report.md a directory", "checks.csv a FIFO",
                                   "output under a file"])
def test_report_and_output_paths_are_checked_before_anything_is_built(where, tmp_path, monkeypatch, capsys):
    _nothing_built(monkeypatch)
    afile = tmp_path / "afile"
    afile.write_text("keep me")
    args = ["verify", "--preset", "toy", "--device", "cpu"]
    if where == "under a file":
        args += ["--report", str(afile / "rep")]
    elif where == "a file":
        args += ["--report", str(afile)]
    elif where == "report.md a directory":
        (tmp_path / "rep" / "report.md").mkdir(parents=True)
        args += ["--report", str(tmp_path / "rep")]
    elif where == "checks.csv a FIFO":   # never replaced, never written into
        (tmp_path / "rep").mkdir()
        os.mkfifo(tmp_path / "rep" / "checks.csv")
        args += ["--report", str(tmp_path / "rep")]
    else:
        args += ["-o", str(afile / "checks.json")]
    assert main(args) != 0
    err = _one_error_line(capsys)
    assert ("--report" if "output" not in where else "--output") in err
    assert afile.read_text() == "keep me"


def test_an_unwritable_report_folder_is_refused_before_anything_is_built(tmp_path, monkeypatch, capsys):
    _nothing_built(monkeypatch)
    locked = tmp_path / "locked"
    locked.mkdir()
    real = os.access   # root may write anywhere: the folder says it is not writable
    monkeypatch.setattr(os, "access", lambda path, mode: False if str(path).startswith(str(locked)) else real(path, mode))
    assert main(["verify", "--preset", "toy", "--report", str(locked / "rep")]) != 0
    assert "permission denied" in _one_error_line(capsys)
    assert list(locked.iterdir()) == []


def test_verify_help_fits_80_columns_and_has_an_example(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "80")
    main(["verify", "--help"])
    text = capsys.readouterr().out
    assert max(map(len, text.splitlines())) <= 80
    assert "<str>" not in text and "<int>" not in text and "<path>" not in text
    assert "Example: costcalc verify --preset toy --device cpu" in text
    words = " ".join(text.split())
    assert "prefill, varlen_prefill, cached_prefill, chunked, decode, generate" in words
    for line in text.splitlines():   # no word cut at a hyphen or a comma
        assert not re.search(r"[A-Za-z]-$", line.rstrip()) and not re.search(r",[a-z]+$", line.rstrip()), line


def test_a_window_band_is_the_definition():
    from costcalc.verify.model import band, causal_mask

    for new, past, window in [(1, 0, 1), (4, 6, 3), (7, 0, 2), (5, 9, 20), (3, 3, 1)]:
        got = band(causal_mask(new, past), past, window)
        want = torch.tensor([[k <= past + q and past + q - k < window for k in range(past + new)]
                             for q in range(new)])
        assert torch.equal(got, want), (new, past, window)


def test_attention_lengths_on_the_toy(monkeypatch, capsys):
    """`--attention-lengths 1k` on the toy failed only through the default --seq 64 (the chunk
    job past the 64-row table): the timing itself never runs the decoder. Its one-row table
    must show as a table, not collapse into its header."""
    _fake_peak(monkeypatch)
    assert main(["verify", "--preset", "toy", "--device", "cpu", "--attention-lengths", "1k"]) == 0
    out = capsys.readouterr().out
    section = out[out.index("kernel_tile 64x512"):].splitlines()
    assert section[2].split()[:3] == ["seq", "causal_s", "full_s"] and section[4].split()[0] == "1024"


def test_the_roofline_floor_is_held_per_row_against_the_calculator():
    """verify predicts each timed job with costcalc on the measured profile, and says when a
    measured time falls below its prediction (a bug in the byte or FLOP model)."""
    from costcalc import calc
    from costcalc.devices import Device
    from costcalc.roofline import Machine
    from costcalc.verify import jobs, roofline
    from costcalc.verify.harness import Outcome

    spec = presets.load("toy")
    machine = Machine(Device("m", {"fp32": 1e9}, 1e9, 10**9))
    job = jobs.decode(spec, 40, 2, (16, 16), torch.device("cpu"))
    expected = calc.rows(calc.table(spec, "decode", "full", precision=roofline.precision(torch.float32),
                                    machine=machine, batch=[2], context=[40]))[0]
    for measured, verdict in ((expected["time_s"] * 3, "holds"), (expected["time_s"] * 0.5, "BROKEN")):
        outcome = Outcome(timings=[{"workload": "decode", "detail": job.detail, "time_s": measured}], timed=[job])
        lines = roofline.predict(outcome, machine, torch.float32)
        row = outcome.timings[0]
        assert row["predicted_time_s"] == pytest.approx(expected["time_s"], rel=1e-3) and row["floor"] == verdict
        assert row["measured_over_predicted"] == pytest.approx(measured / expected["time_s"], rel=1e-2)
        assert ("FLOOR BROKEN" in lines[-1]) == (verdict == "BROKEN")


# --- linear-attention and state-space mixers ----------------------------------------------

HYBRIDS = sorted((Path(__file__).resolve().parent / "data").glob("hybrid-*.json"))
# In CI: Qwen3-Next's structure (Gated DeltaNet, gated attention, MoE) under every convention, and the
# Mamba-2 one (mixer-, attention-, MLP-only and parallel layers) through its two scan forms; the other
# mixers, and Mamba-2 under every convention, under `pytest -m slow`.
FAST_HYBRIDS = ("hybrid-tiny",)
HYBRID_PARAMS = [pytest.param(p, id=p.stem, marks=() if p.stem in FAST_HYBRIDS else pytest.mark.slow)
                 for p in HYBRIDS]
FAST_SCANS = FAST_HYBRIDS + ("hybrid-mamba2",)
SCAN_PARAMS = [pytest.param(p, id=p.stem, marks=() if p.stem in FAST_SCANS else pytest.mark.slow) for p in HYBRIDS]


def _hybrid(path: Path):
    return from_dict(json.loads(path.read_text()), path.stem)


@pytest.mark.parametrize("path", HYBRID_PARAMS)
def test_hybrid_structures_are_exact_under_every_scan_convention(path):
    """Every workload, term and convention of a hybrid preset file: the causal scan and conv
    counted on the recurrent form, full and tiled on the chunked one, each held to the core."""
    spec = _hybrid(path)
    outcome = verify(spec, device="cpu", seqs=(9,), batch=2, tile=(4, 4), repeats=0, show_progress=False)
    bad = [r for r in outcome.checks if not r["match"]]
    assert not bad, bad[:3]
    assert {r["workload"] for r in outcome.checks} == set(jobs.JOBS)
    assert any("within tolerance" in line for line in outcome.extras)       # the cached state is read right
    mixers = {g.block.mixer for g in spec.groups} - {""}
    terms = {"conv"} if mixers == {"shortconv"} else {"scan", "conv"} if mixers - {"lightning"} else {"scan"}

    def counted(term, convention):
        return next(r["counted_flops"] for r in outcome.checks
                    if r["workload"] == "prefill" and r["term"] == term and r["convention"] == convention)

    for term in terms:     # two forms really ran: padded chunks and conv outputs are not the recurrence's
        assert counted(term, "causal") > 0 and counted(term, "full") == counted(term, "tiled")
        assert counted(term, "full") != counted(term, "causal"), term
    operators = {r["operator"] for r in outcome.checks if r["operator"]}
    assert {p.name for g in spec.groups for p in linear.MIXER.get(g.block.mixer, ())} <= operators
    assert not {"scan", "conv", "attention"} & operators          # those are checked per convention


def test_a_linear_operator_is_charged_to_its_own_layers_term():
    """Kimi Linear names the KDA output and the MLA output alike (o_proj): each layer's share
    goes to its own term, and the name's total to the operator."""
    spec = _hybrid(next(p for p in HYBRIDS if p.stem == "hybrid-kda"))
    outcome = verify(spec, device="cpu", seqs=(6,), batch=1, tile=(4, 4), repeats=0, show_progress=False,
                     workloads=("prefill",))
    assert outcome.ok
    terms = {r["term"]: r["counted_flops"] for r in outcome.checks if r["operator"] is None}
    S, d = 6, spec["d"]
    # MLA (h_q 2, r_kv 6, d_nope 4, d_rope 2, d_v 3): q_proj, kv_a_proj_with_mqa, kv_b_proj, o_proj
    assert terms["attn_proj"] == 2 * S * (d * 2 * 6 + d * (6 + 2) + 6 * 2 * (4 + 3) + 2 * 3 * d)
    # KDA (h_lv 4, d_lk = d_lv = 6): q, k, v, f_a, f_b, b, g_a, g_b, o_proj
    assert terms["mixer_proj"] == 2 * S * (3 * d * 24 + d * 6 + 6 * 24 + d * 4 + d * 6 + 6 * 24 + 24 * d)
    o_proj = next(r for r in outcome.checks if r["operator"] == "o_proj")
    assert o_proj["counted_flops"] == 2 * S * (2 * 3 * d + 24 * d)       # the name's total: both layers


@pytest.mark.parametrize("path", SCAN_PARAMS)
def test_the_two_scan_forms_compute_the_same_function(path):
    """The chunked form is the real algorithm, not a FLOP imitation: with weights large enough
    for the state to matter, its outputs equal the recurrent form's, uncached and through a
    cache (a prompt, several tokens over it, single steps)."""
    from costcalc.verify.model import causal_mask

    model = build.from_spec(_hybrid(path), dtype=torch.float64)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for layer in model.layers:
            for p in (layer.mixer.parameters() if layer.mixer is not None else ()):
                p.copy_(torch.rand(p.shape, generator=gen, dtype=p.dtype) - 0.5)
        tokens = torch.randint(0, model.c.V, (2, 11), generator=gen)
        whole = {scan: model(tokens, causal_mask(11), logits="all", scan=scan) for scan in ("recurrent", "chunked")}
        assert torch.allclose(whole["recurrent"], whole["chunked"], atol=1e-10, rtol=0)
        for scan in ("recurrent", "chunked"):
            cache = model.new_cache(2, 11)
            parts = [model(tokens[:, :5], causal_mask(5), 0, cache, logits="all", scan=scan)]
            for start, n in ((5, 3), (8, 1), (9, 2)):
                parts.append(model(tokens[:, start:start + n], causal_mask(n, start), start, cache, logits="all",
                                   scan=scan))
            assert torch.allclose(torch.cat(parts, 1), whole["recurrent"], atol=1e-10, rtol=0), scan


def test_cli_verifies_a_hybrid_preset_file_cut_to_fewer_layers(monkeypatch, capsys):
    """Timed too: the roofline predicts each job's time, a Gated DeltaNet step reading its state
    with no scan product included (it was a KeyError)."""
    _fake_peak(monkeypatch)
    path = next(p for p in HYBRIDS if p.stem == "hybrid-mamba2")
    code = main(["verify", "--preset-file", str(path), "--device", "cpu", "--layers", "2", "--vocab", "16",
                 "--seq", "7", "--repeats", "0", "--workloads", "prefill,decode,generate"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert code == 0
    assert lines[0] == "hybrid-mamba2, 2 of 4 layers (1 mamba2.none, 1 gqa.none), vocabulary 16 of 29 | cpu float32"
    assert re.fullmatch(r"[1-9]\d* checks, 0 mismatches", lines[-1])
    path = next(p for p in HYBRIDS if p.stem == "hybrid-tiny")
    code = main(["verify", "--preset-file", str(path), "--device", "cpu", "--seq", "6", "--repeats", "1",
                 "--workloads", "decode", "-f", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["summary"]["mismatches"] == 0
    assert doc["timings"][0]["predicted_time_s"] > 0


def test_what_the_formulas_leave_out_of_a_mixer_is_measured_and_said():
    """The second counter (``Uncounted``) sizes what FlopCounterMode does not see: the chunked
    delta rule's two unit triangular solves, Q_c (Q_c - 1)(d_lk + d_lv) FLOPs a chunk and value
    head, exactly; elementwise work in both forms; and each job says it in a note."""
    from costcalc.verify.counting import Counter
    from costcalc.verify.model import causal_mask

    spec = _hybrid(next(p for p in HYBRIDS if p.stem == "hybrid-tiny"))
    z = next(g.sizes for g in spec.groups if g.block.mixer == "gdn")
    model = build.from_spec(spec)
    S, q = 9, z["Q_c"]
    with torch.no_grad(), Counter(model) as counter:
        model(torch.zeros(2, S, dtype=torch.long), causal_mask(S), scan="chunked")
    got = counter.result().uncounted
    assert got["chunked"]["solve"] == 2 * -(-S // q) * z["h_lv"] * q * (q - 1) * (z["d_lk"] + z["d_lv"])
    assert got["recurrent"]["solve"] == 0 and got["recurrent"]["elementwise"] > 0 < got["chunked"]["elementwise"]
    outcome = verify(spec, device="cpu", seqs=(S,), batch=1, tile=(4, 4), repeats=0, show_progress=False,
                     workloads=("prefill",))
    assert any(line.startswith(f"prefill B=1 S={S}: not in the formulas, measured in the mixers") and
               "in triangular solves" in line for line in outcome.extras)
