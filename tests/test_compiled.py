"""The recipe cache: same numbers as the sympy core, regenerated when the core changes,
robust to a bad cache, and a calculation that starts without sympy or pandas.
(tests/test_cache_trust.py: a hostile cache.)"""
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from costcalc import codegen, compiled, presets
from costcalc.blocks import coerce
from costcalc.core.breakdown import add_up
from costcalc import symbols as s
from costcalc.vocab import Convention, Logits

ROOT = Path(__file__).resolve().parent.parent


def get(recipe: str, arch: str, convention: str = "causal", logits: str = "last"):
    """``compiled.get`` of a block kind, convention and logits mode given by name (parsed here:
    the calculator takes values)."""
    return compiled.get(recipe, coerce(arch), Convention(convention), Logits(logits))


SIZES = {"L": 7, "d": 512, "h_q": 8, "h_kv": 2, "d_h": 64, "m": 1408, "E": 16, "k": 3, "m_e": 256, "V": 1000,
         "W": 333, "E_s": 2, "m_s": 128, "r_q": 96, "r_kv": 64, "d_nope": 32, "d_rope": 16, "d_v": 24,
         "d_q": 512, "d_kv": 128}


@pytest.mark.parametrize("kind", [k for k in codegen.RECIPES if k not in ("p_lin", "params", "matrices")
                                  and not k.endswith(".bytes")])
# In CI causal on every block, tiled on the window and the MLA MoE blocks, full on the window block (the
# rectangle beside its band); the rest under `pytest -m slow` (full's sums are causal's with the triangle
# made a rectangle; tiled's tiles are the same code on every block).
@pytest.mark.parametrize("arch, convention", [
    pytest.param(arch, convention, id=f"{convention}-{arch}",
                 marks=pytest.mark.slow if (convention == "full" and arch != "window.moe_shared_gate")
                 or (convention == "tiled" and arch in ("dense", "mla-absorbed.dense")) else ())
    for convention in ("causal", "full", "tiled")
    for arch in ("dense", "window.moe_shared_gate", "mla_q.moe_shared", "mla-absorbed.dense")])   # MoE: the 2nd
def test_generated_code_equals_the_sympy_core(kind, arch, convention):
    logits = "none" if kind == "cached_prefill" and convention == "full" else "all" if convention == "tiled" else "last"
    recipe = get(kind, arch, convention, logits)
    breakdown = codegen.RECIPES[kind](coerce(arch), convention, logits)
    rng = random.Random(hash((kind, arch, convention)) % 997)
    for _ in range(4):
        point = {"B": rng.randint(1, 64), "S": rng.randint(1, 900), "T": rng.randint(0, 900),
                 "C": rng.randint(1, 700), "N": rng.randint(1, 300), "b_q": rng.choice([16, 64, 128]),
                 "b_k": rng.choice([16, 32, 128])}
        values = {**SIZES, **point}
        expected = breakdown.evaluate({s.BY_NAME[k]: v for k, v in values.items()})
        assert recipe.evaluate(values, expected) == expected
        # every operator too: the terms are their sums
        operators = {op: e.xreplace({s.BY_NAME[k]: v for k, v in values.items()}) for op, e in breakdown.operators.items()}
        got = recipe.evaluate(values, operators)
        assert got == {op: int(add_up(v)) for op, v in operators.items()}


@pytest.mark.parametrize("kind", [k for k in codegen.RECIPES if k.endswith(".bytes")])
@pytest.mark.parametrize("arch, convention", [("window.moe_shared_gate", "causal"), ("mla_q.moe_shared", "tiled"),
                                              ("mla-absorbed.dense", "full"), ("window.dense", "tiled")])
def test_generated_traffic_equals_the_sympy_core(kind, arch, convention):
    recipe = get(kind, arch, convention, "last")
    exprs = codegen.RECIPES[kind](coerce(arch), convention, "last")
    rng = random.Random(hash((kind, arch, convention)) % 991)
    for _ in range(3):
        values = {**SIZES, "B": rng.randint(1, 64), "S": rng.randint(1, 900), "T": rng.randint(0, 900),
                  "C": rng.randint(1, 700), "N": rng.randint(1, 300), "b_q": 64, "b_k": 32}
        point = {s.BY_NAME[k]: v for k, v in values.items()}
        expected = {name: int(add_up(e.xreplace(point))) for name, e in exprs.items()}
        assert recipe.evaluate(values, expected) == expected


def test_p_lin_recipe_equals_the_core():
    from named import linear

    p_lin = linear.p_lin
    from costcalc.core.breakdown import exact_int

    for spec in presets.load_all():
        for g in spec.groups:
            got = get("p_lin", g.arch).evaluate(g.numbers())["p_lin"]
            values = {s.BY_NAME[k]: v for k, v in g.numbers().items()}
            assert got == exact_int(p_lin(g.arch), values)


def run(code: str, cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "COSTCALC_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT)


PROBE = """
import sys
from costcalc.cli import main
code = main({args!r})
print("MODULES", sorted(m for m in ("sympy", "pandas", "numpy", "torch", "matplotlib") if m in sys.modules))
sys.exit(code)
"""


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_a_warm_calculation_imports_neither_sympy_nor_pandas(tmp_path, fmt):
    args = ["prefill", "--preset", "llama-2-7b", "--seq", "4096", "--format", fmt]
    first = run(PROBE.format(args=args), tmp_path)
    assert first.returncode == 0, first.stderr
    assert "sympy" in first.stdout.splitlines()[-1]            # the first run derives
    assert list(tmp_path.glob(f"{compiled.core_hash()}/prefill-gqa.dense-causal-last.json"))
    second = run(PROBE.format(args=args), tmp_path)
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines()[-1] == "MODULES []"      # the second one does not
    body = "\n".join(second.stdout.splitlines()[:-1])
    assert body == "\n".join(first.stdout.splitlines()[:-1])
    if fmt == "json":
        assert json.loads(body)[0]["total_flops"] > 0


def test_a_corrupt_or_stale_cache_is_derived_again(tmp_path, monkeypatch):
    monkeypatch.setenv("COSTCALC_CACHE_DIR", str(tmp_path))
    compiled.forget()
    try:
        good = get("decode", "dense", "causal", "last")
        path = tmp_path / compiled.core_hash() / "decode-gqa.dense-causal-last.json"
        assert path.is_file()
        path.write_text(path.read_text()[:100])   # truncated
        compiled.forget()
        again = get("decode", "dense", "causal", "last")
        values = presets.load("llama-3.1-8b").numbers() | {"B": 3, "T": 999}
        assert again.evaluate(values) == good.evaluate(values)
        assert '"name": "attention"' in path.read_text()         # rewritten whole
        # Another core (a different hash) never reads this directory's code.
        monkeypatch.setattr(compiled, "core_hash", lambda: "0" * 16)
        compiled.forget()
        get("decode", "dense", "causal", "last")
        assert (tmp_path / ("0" * 16) / "decode-gqa.dense-causal-last.json").is_file()
    finally:
        compiled.forget()


def test_an_unwritable_cache_still_computes(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("COSTCALC_CACHE_DIR", str(blocker / "cache"))
    compiled.forget()
    try:
        recipe = get("prefill", "moe", "full", "all")
        assert recipe.evaluate(presets.load("olmoe-1b-7b").numbers() | {"B": 1, "S": 10})["total"] > 0
    finally:
        compiled.forget()


def test_the_core_hash_covers_the_core_sources():
    files = {p.name for pattern in compiled.SOURCES for p in (ROOT / "costcalc").glob(pattern)}
    assert {"attention.py", "linear.py", "workloads.py", "codegen.py", "symbols.py", "blocks.py"} <= files


def test_the_cache_key_covers_the_sympy_version(monkeypatch):
    import sympy

    assert compiled.sympy_version() == sympy.__version__
    before = compiled.core_hash()
    compiled.core_hash.cache_clear()
    monkeypatch.setattr(compiled, "sympy_version", lambda: "0.0-other")
    try:
        assert compiled.core_hash() != before
    finally:
        compiled.core_hash.cache_clear()


def test_a_cache_that_cannot_load_says_why_under_verbose(tmp_path):
    code = PROBE.format(args=["--verbose", "decode", "-p", "toy", "--context", "4"])
    first = run(code, tmp_path)
    assert first.returncode == 0 and "deriving decode-gqa.dense-causal-last: not cached yet" in first.stderr
    (tmp_path / compiled.core_hash() / "decode-gqa.dense-causal-last.json").write_text('{"hmac": "')
    again = run(code, tmp_path)
    assert again.returncode == 0 and "signature does not hold" in again.stderr
    quiet = run(PROBE.format(args=["decode", "-p", "toy", "--context", "4"]), tmp_path)
    assert quiet.returncode == 0 and quiet.stderr == ""


@pytest.mark.parametrize("body", ["import nonexistent_module_xyz\n", "{}\n", '{"hmac": "00", "recipe": {}}\n'])
def test_any_bad_cache_file_is_derived_again_even_a_well_formed_one(tmp_path, monkeypatch, body):
    monkeypatch.setenv("COSTCALC_CACHE_DIR", str(tmp_path))
    compiled.forget()
    try:
        good = get("decode", "dense", "causal", "last")
        path = tmp_path / compiled.core_hash() / "decode-gqa.dense-causal-last.json"
        path.write_text(body)
        compiled.forget()
        again = get("decode", "dense", "causal", "last")
        values = presets.load("llama-3.1-8b").numbers() | {"B": 3, "T": 999}
        assert again.evaluate(values) == good.evaluate(values)
        assert json.loads(path.read_text())["recipe"]["key"] == "decode-gqa.dense-causal-last"   # rewritten, whole
    finally:
        compiled.forget()
