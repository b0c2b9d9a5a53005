"""Every number every command prints, before and after a refactor: ``-f json`` of every
workload command over every preset, convention and a few small sizes, one file a case.

    python bench/json_diff.py DIR              # run every case, write DIR/<case>.json
    python bench/json_diff.py --compare A B    # print each case that differs; exit 1 if any

The commands run in-process (``costcalc.cli.main``, stdout and stderr captured): a process
per case would take too long. Set ``COSTCALC_CACHE_DIR`` to keep the generated code aside.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONVENTIONS = ("causal", "full", "tiled")


def presets() -> list[str]:
    return sorted(p.stem for p in (ROOT / "presets").glob("*.json"))


def cases() -> dict[str, list[str]]:
    """name -> command line: each preset x workload command x convention, and the byte/time,
    MLA, window-cache, logits, tile and array-path variants."""
    out: dict[str, list[str]] = {}
    for p in presets():
        m = ["--preset", p]
        out[f"{p}.presets-show"] = ["presets", "show", p]
        out[f"{p}.crossover"] = ["crossover", *m]
        out[f"{p}.crossover.h100"] = ["crossover", *m, "--device", "h100", "--batch", "8"]
        out[f"{p}.memory.h100"] = ["memory", *m, "--device", "h100", "--batch", "1,16", "--context", "1k,33k"]
        out[f"{p}.memory.h100.whole"] = ["memory", *m, "--device", "h100", "--context", "5000",
                                         "--window-cache", "whole", "--kv-dtype", "fp8"]
        out[f"{p}.prefill.varlen"] = ["prefill", *m, "--lengths", "3,100,17", "--convention", "all"]
        out[f"{p}.prefill.varlen.padded"] = ["prefill", *m, "--lengths", "3,100,17", "--padded"]
        for c in CONVENTIONS:
            k = ["--convention", c]
            out[f"{p}.prefill.{c}"] = ["prefill", *m, *k, "--seq", "1,17,1000", "--batch", "1,3"]
            out[f"{p}.prefill.{c}.all"] = ["prefill", *m, *k, "--seq", "33", "--logits", "all"]
            out[f"{p}.prefill.{c}.h100"] = ["prefill", *m, *k, "--seq", "1,700", "--batch", "2", "--device", "h100"]
            out[f"{p}.prefill.{c}.cached"] = ["prefill", *m, *k, "--seq", "1,64", "--cached-prefix", "0,900",
                                              "--window-cache", "rolling"]
            out[f"{p}.prefill.{c}.cached.h100"] = ["prefill", *m, *k, "--seq", "64", "--cached-prefix", "900",
                                                   "--device", "h100", "--weight-dtype", "int4"]
            out[f"{p}.chunked.{c}"] = ["chunked", *m, *k, "--seq", "1000", "--chunk", "256", "--prefix", "0,50"]
            out[f"{p}.chunked.{c}.all.h100"] = ["chunked", *m, *k, "--seq", "700", "--chunk", "300",
                                                "--logits", "all", "--device", "h100"]
            out[f"{p}.decode.{c}"] = ["decode", *m, *k, "--context", "1,1000,5000", "--batch", "1,8"]
            out[f"{p}.decode.{c}.rolling"] = ["decode", *m, *k, "--context", "5000", "--window-cache", "rolling"]
            out[f"{p}.decode.{c}.h100"] = ["decode", *m, *k, "--context", "2000", "--batch", "4",
                                           "--device", "h100", "--routing", "worst"]
            out[f"{p}.generate.{c}"] = ["generate", *m, *k, "--prompt", "1,100", "--new", "1,50", "--batch", "2"]
            out[f"{p}.generate.{c}.h100"] = ["generate", *m, *k, "--prompt", "300", "--new", "20",
                                             "--device", "h100", "--kv-dtype", "fp8"]
            out[f"{p}.train.{c}"] = ["train", *m, *k, "--seq", "1,512", "--batch", "1,4"]
        for form in ("naive", "absorbed", "expanded"):
            if p in ("deepseek-v2-lite", "deepseek-v3", "toy"):
                out[f"{p}.decode.mla-{form}"] = ["decode", *m, "--mla", form, "--context", "100", "--device", "h100"]
                out[f"{p}.prefill.mla-{form}"] = ["prefill", *m, "--mla", form, "--seq", "100"]
                out[f"{p}.train.mla-{form}"] = ["train", *m, "--mla", form, "--seq", "100"]
                out[f"{p}.crossover.mla-{form}"] = ["crossover", *m, "--mla", form]
    # the array path (more than 256 points) and the tile
    for p in ("llama-3.1-8b", "gemma-3-12b", "mixtral-8x7b", "deepseek-v3"):
        m = ["--preset", p]
        out[f"{p}.prefill.array"] = ["prefill", *m, "--seq", "1:300:1", "--convention", "all", "--tile", "64x32"]
        out[f"{p}.decode.array"] = ["decode", *m, "--context", "1:600:2", "--convention", "all"]
        out[f"{p}.generate.array"] = ["generate", *m, "--prompt", "1:300:1", "--new", "7"]
        out[f"{p}.chunked.many"] = ["chunked", *m, "--seq", "100000", "--chunk", "300", "--convention", "all"]
        out[f"{p}.compare.prefill"] = ["compare", "prefill", *m, "--seq", "1000,4096", "--batch", "1,2"]
        out[f"{p}.compare.decode"] = ["compare", "decode", *m, "--context", "1000", "--batch", "3"]
        out[f"{p}.compare.generate"] = ["compare", "generate", *m, "--seq", "1000", "--new", "30"]
        out[f"{p}.compare.train"] = ["compare", "train", *m, "--seq", "2048"]
        out[f"{p}.mfu"] = ["mfu", *m, "--seq", "4096", "--batch", "8", "--device", "h100", "--step-time", "1.5"]
    out["several.prefill"] = ["prefill", "--preset", "toy,llama-3.1-8b", "--seq", "64", "--convention", "all"]
    for workload in ("prefill", "cached_prefill", "decode", "generate", "train", "chunked", "varlen", "crossover"):
        for arch in ("dense", "moe", "mla", "window.dense", "chunk.moe_shared", "mla_q-absorbed.moe"):
            for c in CONVENTIONS:
                if (workload, c) != ("chunked", "tiled"):   # a sum over tiles of every chunk: ~40 s a case
                    out[f"formula.{workload}.{arch}.{c}"] = ["formula", workload, "--arch", arch, "--convention", c]
    return out


def run(argv: list[str]) -> dict:
    from costcalc.cli import main

    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            code = main([*argv, "-f", "json"])
        except SystemExit as exc:   # a command that exits of its own
            code = exc.code
        except Exception as exc:    # a crash is a result too (and the other cases still run)
            code = f"raised {type(exc).__name__}: {exc}"
    text = stdout.getvalue()
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = text
    return {"argv": argv, "exit": code, "stdout": parsed, "stderr": stderr.getvalue()}


def write(folder: Path, only: str = "") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    chosen = {k: v for k, v in cases().items() if only in k}
    for i, (name, argv) in enumerate(chosen.items()):
        (folder / f"{name}.json").write_text(json.dumps(run(argv), indent=1, sort_keys=True) + "\n")
        if i % 200 == 0:
            print(f"{i}/{len(chosen)} {time.perf_counter() - t0:.0f}s", file=sys.stderr)
    print(f"{len(chosen)} cases in {time.perf_counter() - t0:.0f}s -> {folder}", file=sys.stderr)


def compare(a: Path, b: Path) -> int:
    names = sorted({p.name for p in a.glob("*.json")} | {p.name for p in b.glob("*.json")})
    differ = 0
    for name in names:
        x, y = a / name, b / name
        if not (x.exists() and y.exists()):
            print(f"{name}: only in {a if x.exists() else b}")
            differ += 1
        elif x.read_text() != y.read_text():
            print(f"{name}: differs")
            differ += 1
    print(f"{differ} of {len(names)} cases differ")
    return 1 if differ else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", type=Path)
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"))
    parser.add_argument("--only", default="", help="cases whose name contains this")
    args = parser.parse_args()
    if args.compare:
        sys.exit(compare(*args.compare))
    if args.folder is None:
        parser.error("give a folder, or --compare A B")
    sys.path.insert(0, str(ROOT))
    write(args.folder, args.only)
