"""costcalc plot: real files, the right size, and what they mark is what the data says."""
import struct
import sys

import pytest

from costcalc import calc, plot, presets
from costcalc.cli import main
from costcalc.errors import CostcalcError


def png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_prefill_png_for_two_presets(tmp_path):
    specs = [presets.load("llama-3.1-8b"), presets.load("mixtral-8x7b")]
    xs = [2**p for p in range(10, 21)]
    drawn = plot.figure("prefill", specs, xs, tmp_path / "p.png", size=(5, 3), dpi=100)
    assert png_size(tmp_path / "p.png") == (2 * 500, 300)
    assert (tmp_path / "p.png").stat().st_size > 10_000
    for spec, panel in zip(specs, drawn.panels):
        assert panel["xscale"] == "log" and panel["yscale"] == "log" and panel["style"] == "lines"
        table = calc.table(spec, "prefill", "causal", "last", None, batch=[1] * len(xs), seq=xs)
        assert panel["series"]["total"] == table["total_flops"]
        assert panel["series"]["attention"] == table["attention_flops"]
        crossing = next(r for r in calc.crossover(spec, ["causal"]) if r["quantity"].startswith("prefill"))
        assert [m["x"] for m in panel["markers"]] == [crossing["tokens"]]
        # the marker sits where the drawn attention and linear curves cross
        i = next(k for k, x in enumerate(xs) if x > crossing["tokens"])
        linear = [t - a - h for t, a, h in zip(table["total_flops"], table["attention_flops"], table["lm_head_flops"])]
        assert table["attention_flops"][i - 1] < linear[i - 1] and table["attention_flops"][i] > linear[i]


def test_decode_svg_is_stacked_and_marks_t_equal(tmp_path):
    spec = presets.load("llama-3.1-405b")
    xs = list(range(1024, 256 * 1024 + 1, 4096))
    drawn = plot.figure("decode", [spec], xs, tmp_path / "d.svg", batch=4)
    text = (tmp_path / "d.svg").read_text()
    assert text.lstrip().startswith("<?xml") and "</svg>" in text
    panel = drawn.panels[0]
    assert panel["style"] == "stacked" and panel["xscale"] == "log" and panel["yscale"] == "linear"
    [marker] = panel["markers"]
    label = marker["label"]
    assert label in text and "keys" in label and "context" in label
    # The marker sits on the cached context where `decode --context` has attention == linear.
    x = marker["x"]
    below, above = (calc.decode(spec, c, 4) for c in (int(x), int(x) + 1))
    assert below["attention_flops"] <= below["linear_flops"] < above["attention_flops"]
    keys = next(r["tokens"] for r in calc.crossover(spec) if r["quantity"] == "decode_t_equal")
    assert x == round(keys - 1, 2)
    assert panel["series"]["total"][5] == calc.decode(spec, xs[5], 4)["total_flops"]


def test_the_generation_marks_the_token_whose_step_reaches_t_equal(tmp_path):
    spec = presets.load("llama-3.1-8b")
    prompt = 26000
    drawn = plot.figure("generate", [spec], list(range(1, 1001)), tmp_path / "g.png", prompt=prompt)
    [marker] = drawn.panels[0]["markers"]
    j = int(marker["x"])
    # token j >= 2 comes from the decode step over prompt + j - 2 cached tokens
    step = calc.decode(spec, prompt + j - 2)
    assert step["attention_flops"] == step["linear_flops"] and f"token {j}" in marker["label"]


def test_generation_per_token_and_its_mean(tmp_path):
    spec = presets.load("qwen3-30b-a3b")
    drawn = plot.figure("generate", [spec], list(range(1, 3001)), tmp_path / "g.png", prompt=2048)
    panel = drawn.panels[0]
    rows = calc.generate(spec, 2048, 3000)
    assert panel["series"]["total"][0] == rows[0]["total_flops"]                  # token 1: the prefill
    assert panel["series"]["total"][1] == calc.decode(spec, 2048)["total_flops"]  # token 2: first decode step
    assert sum(panel["series"]["total"]) == rows[-1]["total_flops"]
    assert panel["mean_per_token"] == rows[-1]["total_flops"] / 3000


def test_conventions_compared_on_one_panel(tmp_path):
    spec = presets.load("llama-3.1-8b")
    xs = list(range(1024, 65 * 1024, 1024))
    drawn = plot.figure("prefill", [spec], xs, tmp_path / "c.svg", conventions=["causal", "full", "tiled"],
                        tile=(128, 64))
    series = drawn.panels[0]["series"]
    assert all(c <= t <= f for c, t, f in zip(series["attention_causal"], series["attention_tiled"],
                                              series["attention_full"]))
    labels = [m["label"] for m in drawn.panels[0]["markers"]]
    assert any(l.endswith("(causal)") for l in labels) and any(l.endswith("(full)") for l in labels)
    assert all(l in (tmp_path / "c.svg").read_text() for l in labels)


def test_plot_command_writes_the_file(capsys, tmp_path):
    target = tmp_path / "fig.png"
    code = main(["plot", "prefill", "--preset", "llama-3.1-8b", "--seq", "1k:1M:x2", "--output", str(target),
                 "--size", "6x4", "--dpi", "80"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert png_size(target) == (480, 320)
    assert "attention = linear at S = 53,247" in err


@pytest.mark.parametrize("args, message", [
    (["prefill", "--preset", "toy", "--seq", "1:8", "-o", "x.jpg"], "must name a .png or .svg file"),
    (["prefill", "--preset", "toy", "--seq", "1:8", "-o", "x.png", "--dpi", "100000"], "at most 20,000 a side"),
    (["prefill", "--preset", "toy", "--seq", "1:8", "-o", "."], "is a directory"),
    (["prefill", "--preset", "toy", "--seq", "1:8", "-o", ""], "the path is empty"),
    (["prefill", "--preset", "toy", "-o", "x.png"], "needs --seq"),
    (["generate", "--preset", "toy", "--new", "8", "-o", "x.png"], "needs --prompt"),
    (["prefill", "--preset", "toy", "--seq", "8", "-o", "x.png"], "at least two"),
    (["prefill", "--preset", "toy", "--seq", "1:8", "-o", "x.png", "--size", "big"], "--size"),
    (["histogram", "--preset", "toy", "-o", "x.png"], "expected prefill, decode or generate"),
])
def test_bad_plot_input_is_one_line_and_no_file(args, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = main(["plot", *args])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_without_matplotlib_the_error_says_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(CostcalcError, match=r"pip install 'costcalc\[plot\]'"):
        plot.figure("prefill", [presets.load("toy")], [1, 2], tmp_path / "x.png")


def test_a_hybrid_and_an_all_windowed_model_side_by_side(tmp_path):
    specs = [presets.load("mistral-7b-v0.1"), presets.load("deepseek-v3")]
    drawn = plot.figure("prefill", specs, [2**p for p in range(10, 21)], tmp_path / "h.svg")
    never, mla = drawn.panels
    assert [m["x"] for m in never["markers"]] == [None] and "never" in never["markers"][0]["label"]
    assert "shared_experts" in mla["series"] and mla["markers"][0]["x"] > 0
    text = (tmp_path / "h.svg").read_text()
    assert "never reaches" in text and "shared experts" in text


def test_many_models_wrap_into_rows(tmp_path):
    specs = [presets.load(n) for n in ("llama-3.1-8b", "gemma-3-12b", "gpt-oss-20b", "mixtral-8x7b")]
    drawn = plot.figure("decode", specs, [1024, 4096], tmp_path / "m.png", size=(4, 3), dpi=50)
    assert len(drawn.panels) == 4 and png_size(tmp_path / "m.png") == (3 * 200, 2 * 150)


def test_a_time_plot_says_the_dtypes_its_times_depend_on(tmp_path):
    from costcalc import devices
    from costcalc.roofline import Machine, Precision
    from costcalc.vocab import Dtype

    precision = Precision(Dtype.int4, Dtype.fp8, Dtype.bf16, 64)
    plot.figure("decode", [presets.load("mixtral-8x7b")], [1024, 4096], tmp_path / "t.svg",
                traffic=(precision, Machine(devices.load("h100"), 0.5, 0.8)))
    text = (tmp_path / "t.svg").read_text()
    for words in ("weights int4 (groups of 64)", "KV fp8", "compute bf16", "expected routing", "efficiency 0.5/0.8",
                  "on h100, batch 1"):
        assert words in text, words


@pytest.mark.parametrize("title", [r"bad $\frac{$ x", "$" + "{" * 200 + "$"])
def test_a_title_with_dollar_signs_is_drawn_as_written(tmp_path, title):
    """matplotlib reads $...$ as math: a preset's title (or --title) is drawn as plain text."""
    import json
    from pathlib import Path

    preset = json.loads((Path(__file__).parent.parent / "presets" / "toy.json").read_text())
    (tmp_path / "p.json").write_text(json.dumps({**preset, "title": title}))
    out = tmp_path / "t.svg"
    assert main(["plot", "prefill", "--preset-file", str(tmp_path / "p.json"), "--seq", "4:16:x2", "-o", str(out)]) == 0
    assert out.stat().st_size > 1_000
