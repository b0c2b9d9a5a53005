"""verify/: the torch decoder executes exactly what the core's formulas say (CPU)."""
import json

import pytest

import torch

from costcalc import presets
from costcalc.cli import main
from costcalc.spec import from_dict
from verify import build, toy
from verify.counting import tiled_area
from verify.run import verify


def test_toy_reproduces_the_tutorial_table():
    got = toy.work_counts(build.toy())
    for key, value in toy.PUBLISHED.items():
        assert got[key] == value, key
    assert got["tokens_recompute"] == toy.PUBLISHED["tokens"]


@pytest.mark.parametrize("spec", [
    presets.load("toy"),
    from_dict({"name": "small-dense", "arch": "dense", "L": 2, "d": 48, "h_q": 6, "h_kv": 2, "d_h": 8,
               "m": 40, "V": 37}, "small-dense"),
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
]


@pytest.mark.parametrize("data", STRUCTURES, ids=lambda d: d["name"])
def test_real_structures_are_exact_too(data):
    spec = from_dict(data, data["name"])
    outcome = verify(spec, device="cpu", dtype="float64", seqs=(11, 30), batch=2, tile=(4, 8), repeats=0,
                     show_progress=False)
    bad = [r for r in outcome.checks if not r["match"]]
    assert not bad, bad[:3]
    terms = {r["term"] for r in outcome.checks}
    assert {"attn_proj", "attention", "lm_head"} <= terms
    if "shared" in json.dumps(data):
        assert "shared_experts" in terms
    assert any("within tolerance" in line for line in outcome.extras)


@pytest.mark.parametrize("mla", ["naive", "absorbed", "expanded"])
def test_mla_forms_forced_everywhere_are_exact(mla):
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


def test_mla_absorbed_and_naive_compute_the_same_function():
    spec = from_dict(STRUCTURES[1], "mla")
    model = build.from_spec(spec, dtype=torch.float64)
    from verify.model import causal_mask

    tokens = torch.randint(0, spec["V"], (2, 9))
    with torch.no_grad():
        naive = model(tokens, causal_mask(9), logits="all", form="naive")
        absorbed = model(tokens, causal_mask(9), logits="all", form="absorbed")
    assert torch.allclose(naive, absorbed, atol=1e-10)


def test_a_window_mask_reads_w_keys():
    from verify.model import band, causal_mask

    mask = band(causal_mask(4, past=6), past=6, window=3)
    assert mask.sum(-1).tolist() == [3, 3, 3, 3]
    assert mask[0].nonzero().flatten().tolist() == [4, 5, 6]


def test_tiled_area_matches_the_published_tile_counts():
    # docs/torch-counting.md: S=1000, D=64, H=2 -> tile 128: 288,129,024 FLOPs
    allowed = torch.ones(1000, 1000, dtype=torch.bool).tril()
    assert 4 * 64 * 2 * tiled_area(allowed, 128, 128) == 288_129_024
    assert 4 * 64 * 2 * int(allowed.sum()) == 256_256_000


def test_cli_verify_writes_a_report(tmp_path, capsys):
    code = main(["verify", "--preset", "toy", "--device", "cpu", "--seq", "6", "--repeats", "1",
                 "--report", str(tmp_path / "rep"), "-f", "json", "-o", str(tmp_path / "checks.json")])
    assert code == 0
    document = json.loads((tmp_path / "checks.json").read_text())   # one document: checks, timings, ...
    rows = document["checks"]
    assert rows and all(r["match"] for r in rows) and document["summary"]["mismatches"] == 0
    assert {"workload", "term", "convention", "formula_flops", "counted_flops", "ratio"} <= set(rows[0])
    report = (tmp_path / "rep" / "report.md").read_text()
    assert "0 mismatches" in report and "score pairs, cache" in report
    timings = (tmp_path / "rep" / "timings.csv").read_text()
    assert "time_s" in timings and "peak_fraction" in timings


@pytest.mark.parametrize("args, message", [
    (["--device", "tpu"], "unknown device 'tpu'"),
    (["--dtype", "int3"], "unknown dtype 'int3'"),
    (["--workloads", "prefill,bake"], "unknown workload 'bake'"),
] + ([(["--device", "cuda"], "torch sees no CUDA device")] if not torch.cuda.is_available() else []))
def test_verify_bad_input(args, message, capsys):
    code = main(["verify", "--preset", "toy", "--repeats", "0", *args])
    err = capsys.readouterr().err
    assert code != 0 and message in err and len(err.strip().splitlines()) == 1


def test_verify_refuses_a_model_that_does_not_fit(capsys):
    code = main(["verify", "--preset", "llama-3.1-405b", "--device", "cpu", "--repeats", "0"])
    err = capsys.readouterr().err
    assert code != 0 and "GiB free" in err and len(err.strip().splitlines()) == 1


def test_gpu_check_script_logic_on_cpu(tmp_path):
    """The prepared GPU script, run at toy sizes on CPU (DRY=1): it must finish and report exact matches."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "DRY": "1", "OUT": str(tmp_path), "PYTHONPATH": str(root),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(["bash", str(root / "verify" / "gpu_check.sh")], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    for part in ("dense", "moe", "window"):
        assert "0 mismatches" in (tmp_path / part / "report.md").read_text()
