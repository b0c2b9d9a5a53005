"""Hostile input and extreme numbers (the reliability audit's cases): each ends in the right
answer or in one ``error:`` line; nothing reaches the terminal as a control character, JSON
never holds NaN or Infinity, and the stated maxima hold just under and refuse just over."""
import csv
import io
import json
import time
from pathlib import Path

import pandas as pd
import pytest

from cli_run import one_error, run
from costcalc import render, spec
from costcalc.errors import CostcalcError, quote

HF = Path(__file__).parent / "data" / "hf-configs"
PRESETS = Path(__file__).parent.parent / "presets"
ESCAPES = "\x1b]0;owned\x07\x1b[2J\x1b[1;31mFAKE: all checks passed\x1b[0m"


def _changed(source: Path, path: Path, changes: dict) -> str:
    """``source``'s JSON with ``changes`` applied, written to ``path`` (its name returned)."""
    path.write_text(json.dumps({**json.loads(source.read_text()), **changes}))
    return str(path)


def _config(tmp_path, base="llama-3.1-8b", file="c.json", **changes):
    return _changed(HF / f"{base}.json", tmp_path / file, changes)


def _preset(tmp_path, base="llama-3.1-8b", file="p.json", **changes):
    return _changed(PRESETS / f"{base}.json", tmp_path / file, changes)


def _strict(text):
    """JSON as the standard defines it: NaN and Infinity are not numbers."""
    return json.loads(text, parse_constant=lambda c: pytest.fail(f"not JSON: {c}"))


# B2: a name is matched whole; a field with a line break is quoted in CSV.

def test_a_name_with_a_trailing_newline_is_refused(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, "presets", "import", str(HF / "llama-3.1-8b.json"), "--name", "evil\n")
    assert code == 2 and one_error(err, "is not a preset name")
    assert list(tmp_path.iterdir()) == []
    code, _, err = run(capsys, "prefill", "--preset-file", _preset(tmp_path, file="evil.json", name="evil\n"),
                       "--seq", "1024", "-f", "csv")
    assert code == 2 and one_error(err, "is not a preset name")
    config = tmp_path / "evil\n.json"       # a config's name is its file's: the same check
    config.write_bytes((HF / "llama-3.1-8b.json").read_bytes())
    code, _, err = run(capsys, "prefill", "--config", str(config), "--seq", "1024", "-f", "csv")
    assert code == 2 and one_error(err, "is not a preset name")
    config = tmp_path / "my config (1).json"    # the error says where the name came from
    config.write_bytes((HF / "llama-3.1-8b.json").read_bytes())
    code, _, err = run(capsys, "prefill", "--config", str(config), "--seq", "1024")
    assert code == 2 and one_error(err, "the name taken from its file name: 'my config (1)' is not a preset name")
    with pytest.raises(CostcalcError):
        spec.check_name("x\n", "name")


@pytest.mark.parametrize("text", ["two\nlines", "carriage\rreturn", "both\r\n", 'quote " and\n'])
def test_csv_fields_with_line_breaks_round_trip(text):
    rows = [{"preset": text, "n": 1}, {"preset": "plain", "n": 2}]
    for data in (rows, render.as_table(rows)):        # the row writer and the column writer
        out = render.render(data, "csv")
        assert list(csv.reader(io.StringIO(out, newline=""))) == [["preset", "n"], [text, "1"], ["plain", "2"]]
        frame = pd.read_csv(io.StringIO(out, newline=""), dtype=str, keep_default_na=False)
        assert frame.shape == (2, 2) and frame["preset"].tolist() == [text, "plain"]


# B3: control characters from a user's file are refused where it is read, and escaped where shown.

def test_a_device_files_escape_sequences_are_refused(capsys, tmp_path):
    path = tmp_path / "dev.json"
    device = {"name": "mine", "title": ESCAPES, "peak_flops": {"bf16": 1e15}, "mem_bw": 3e12, "mem_bytes": 80 * 10**9}
    path.write_text(json.dumps(device))
    code, out, err = run(capsys, "devices", "show", "--device-file", str(path))
    assert code == 2 and one_error(err, "control character") and "\x1b" not in err + out
    path.write_text(json.dumps({**device, "title": "ok", "peak_flops": {"bf16\x1b[2J": 1e15}}))
    code, out, err = run(capsys, "devices", "show", "--device-file", str(path))
    assert code == 2 and one_error(err, "control character") and "\x1b" not in err + out
    code, out, err = run(capsys, "prefill", "-p", "toy", "--seq", "4", "--device-file", str(path))
    assert code == 2 and one_error(err, "control character")


def test_a_preset_files_escape_sequences_are_refused(capsys, tmp_path):
    path = _preset(tmp_path, title=ESCAPES)
    for fmt in ("table", "markdown"):
        code, out, err = run(capsys, "presets", "show", "--preset-file", path, "-f", fmt)
        assert code == 2 and one_error(err, "control character") and "\x1b" not in err + out
    code, out, err = run(capsys, "presets", "show", "--preset-file",
                         _preset(tmp_path, file="q.json", source={"note\x9b": "x"}))
    assert code == 2 and one_error(err, "control character")


@pytest.mark.parametrize("char", ["\u202e", "\u200b", "\u2066", "\ufeff", "\u2028"])
def test_invisible_characters_that_reorder_a_title_are_refused(capsys, tmp_path, char):
    path = _preset(tmp_path, title=f"H100 {char}001H")
    code, out, err = run(capsys, "presets", "show", "--preset-file", path)
    assert code == 2 and one_error(err, "control character") and char not in err + out
    assert render.render([{"title": f"a{char}b"}], "table").count(f"\\u{ord(char):04x}") == 1


def test_a_devices_unknown_peak_keys_are_quoted_short(capsys, tmp_path):
    device = json.loads((PRESETS / "devices" / "h100.json").read_text())
    device["peak_flops"] = {"x" * 100_000: 1e15}
    path = tmp_path / "d.json"
    path.write_text(json.dumps(device))
    code, _, err = run(capsys, "prefill", "-p", "toy", "--seq", "4", "--device-file", str(path))
    assert code == 2 and one_error(err, "peak") and len(err) < 300


def test_text_shown_escapes_control_characters(capsys, tmp_path):
    """The second guard: whatever reaches a table, Markdown or a field listing is shown as text."""
    rows = [{"title": ESCAPES + "\x7f\x85", "n": 1}]
    for fmt in ("table", "markdown"):
        shown = render.render(rows, fmt)
        assert not any(c in shown for c in "\x1b\x07\x7f\x85") and "\\x1b]0;owned\\x07" in shown
    from costcalc.cli.emit import write_fields

    write_fields(None, {"title": ESCAPES, "key\x1b": "v"})
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\\x1b[2J" in out and "key\\x1b" in out


# B5 / E3: non-finite numbers never reach JSON; the inputs that made them are refused.

MFU = ["mfu", "prefill", "-p", "llama-3.1-8b", "--seq", "1024", "-f", "json"]


@pytest.mark.parametrize("args, message", [
    (MFU + ["--time", "1", "--peak", "1e-300"], "--peak must be between 1e+06 and 1e+21"),
    (MFU + ["--time", "1", "--peak", "1e-320"], "--peak must be between"),
    (MFU + ["--time", "1", "--peak", "5e-324"], "--peak must be between"),
    (MFU + ["--time", "1", "--peak", "1e22"], "--peak must be between"),
    (MFU + ["--time", "1e-320", "--device", "h100"], "--time must be between 1e-09 and 1e+09"),
    (MFU + ["--time", "1e-320", "--peak", "1e-320"], "must be between"),
    (MFU + ["--time", "2e9", "--device", "h100"], "--time must be between"),
    (MFU + ["--tokens-per-s", "5e-324", "--device", "h100"], "--tokens-per-s must be between 0.001 and 1e+15"),
    (MFU + ["--tokens-per-s", "1e16", "--device", "h100"], "--tokens-per-s must be between"),
    (["prefill", "-p", "llama-3.1-8b", "--seq", "1k", "-d", "h100", "--efficiency", "1e-320", "-f", "json"],
     "compute efficiency must be between 0.001 and 1"),
    (["prefill", "-p", "llama-3.1-8b", "--seq", "1k", "-d", "h100", "--efficiency", "5e-324"],
     "compute efficiency must be between"),
    (["decode", "-p", "llama-3.1-8b", "--context", "1k", "-d", "h100", "--efficiency", "1e-320"],
     "compute efficiency must be between"),
    (["decode", "-p", "llama-3.1-8b", "--context", "1k", "-d", "h100", "--efficiency", "1,1e-320", "-f", "json"],
     "memory efficiency must be between"),
])
def test_subnormal_and_absurd_rates_are_refused(capsys, args, message):
    code, out, err = run(capsys, *args)
    assert code == 2 and one_error(err, message) and out == ""


@pytest.mark.parametrize("args", [
    MFU + ["--time", "1e-9", "--peak", "1e21"],
    MFU + ["--time", "1e9", "--peak", "1e6"],
    MFU + ["--tokens-per-s", "1e-3", "--device", "h100"],
    MFU + ["--tokens-per-s", "1e15", "--device", "h100"],
    ["prefill", "-p", "llama-3.1-8b", "--seq", "1k", "-d", "h100", "--efficiency", "0.001", "-f", "json"],
    ["decode", "-p", "llama-3.1-8b", "--context", "1k", "-d", "h100", "--efficiency", "1,0.001", "-f", "json"],
])
def test_rates_at_their_bounds_give_finite_json(capsys, args):
    code, out, err = run(capsys, *args)
    assert code == 0, err
    assert _strict(out)


def test_a_non_finite_number_never_reaches_json():
    for value in (float("inf"), float("nan")):
        with pytest.raises(CostcalcError, match="internal error: row 1 has a value that is not a finite number"):
            render.render([{"time_s": value}], "json")


# D1 / D2 / E2: layers, groups and sizes have stated maxima, checked before any work.

def test_a_config_of_ten_million_layers_is_refused_at_once(capsys, tmp_path):
    for layers in (10**7, 10**30, spec.MAX_LAYERS + 1):
        path = _config(tmp_path, num_hidden_layers=layers)
        start = time.perf_counter()
        code, _, err = run(capsys, "prefill", "--config", path, "--seq", "1024", "-f", "json")
        assert time.perf_counter() - start < 1
        assert code == 2 and one_error(err, f"'num_hidden_layers' is too large (at most {spec.MAX_LAYERS:,})")


@pytest.mark.parametrize("base", ["llama-3.1-8b", pytest.param("deepseek-v3", marks=pytest.mark.slow), "olmo-3-1025-7b"])
def test_a_config_of_the_most_layers_answers(capsys, tmp_path, base):
    """The last 12 layers (a whole period of every layer pattern here) cost the same at the most
    layers as at 1,024: the layer kinds repeat exactly."""
    totals = {}
    for layers in (spec.MAX_LAYERS, spec.MAX_LAYERS - 12, 1024, 1012):
        path = _config(tmp_path, base, file=f"{layers}.json", num_hidden_layers=layers, layer_types=None)
        code, out, err = run(capsys, "prefill", "--config", path, "--seq", "1024", "-f", "json")
        assert code == 0, err
        totals[layers] = _strict(out)[0]["total_flops"]
    assert totals[spec.MAX_LAYERS] - totals[spec.MAX_LAYERS - 12] == totals[1024] - totals[1012] > 0


def test_a_preset_of_the_most_groups_answers_and_one_more_is_refused(capsys, tmp_path):
    groups = [{"count": 1, "arch": "window.moe", "W": i + 1} for i in range(spec.MAX_GROUPS)]
    gpt_oss = json.loads((PRESETS / "gpt-oss-20b.json").read_text())
    path = tmp_path / "g.json"
    path.write_text(json.dumps({**gpt_oss, "layers": groups}))
    start = time.perf_counter()
    code, out, err = run(capsys, "prefill", "--preset-file", str(path), "--seq", "1024", "--device", "h100", "-f", "json")
    assert code == 0, err
    assert time.perf_counter() - start < 10       # about 1 s on one core (it was 3 ms a group)
    path.write_text(json.dumps({**gpt_oss, "layers": groups + [{"count": 1, "arch": "gqa.moe"}]}))
    code, _, err = run(capsys, "prefill", "--preset-file", str(path), "--seq", "1024", "--device", "h100")
    assert code == 2 and one_error(err, f"lists {spec.MAX_GROUPS + 1:,} groups (at most {spec.MAX_GROUPS:,}")


def test_a_sweep_over_many_groups_is_capped_by_its_group_points_before_the_work(capsys, tmp_path, monkeypatch):
    """Points x layer groups bound a FLOPs sweep (1,024 groups x 1M points took 24 GB); the groups'
    columns are added as they come, so the cap is about time, not memory."""
    from costcalc import evaluate

    monkeypatch.setattr(evaluate, "MAX_GROUP_POINTS", 3 * 300)
    path = tmp_path / "g.json"
    layers = [{"count": 1, "arch": "window.dense", "W": w} for w in (5, 7, 11)]
    path.write_text(json.dumps({"name": "g", "d": 64, "V": 100, "h_q": 4, "h_kv": 2, "d_h": 16, "m": 96,
                                "layers": layers}))
    code, out, err = run(capsys, "prefill", "--preset-file", str(path), "--seq", "1:300", "-f", "csv")
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    single = [json.loads(run(capsys, "prefill", "--preset-file", str(path), "--seq", s, "-f", "json")[1])[0]
              for s in ("1", "257", "300")]
    assert [rows[i]["total_flops"] for i in (0, 256, 299)] == [str(r["total_flops"]) for r in single]
    code, _, err = run(capsys, "prefill", "--preset-file", str(path), "--seq", "1:301", "-f", "csv")
    assert code == 2 and one_error(err, "301 points x 3 layer groups = 903 group points (at most 900)")


@pytest.mark.parametrize("field, value", [("hidden_size", 10**200), ("vocab_size", 10**2200),
                                          ("intermediate_size", spec.MAX_SIZE + 1)])
def test_a_huge_size_in_a_config_is_refused(capsys, tmp_path, field, value):
    path = _config(tmp_path, **{field: value})
    for args in (["prefill", "--config", path, "--seq", "1024"], ["presets", "show", "--config", path],
                 ["prefill", "--config", path, "--seq", "1024", "-f", "csv"]):
        code, _, err = run(capsys, *args)
        assert code == 2 and one_error(err, f"is too large (at most {spec.MAX_SIZE:,})") and len(err) < 300


@pytest.mark.parametrize("field, value", [("d", 10**2200), ("V", spec.MAX_SIZE + 1), ("L", spec.MAX_LAYERS + 1)])
def test_a_huge_size_in_a_preset_file_is_refused(capsys, tmp_path, field, value):
    code, _, err = run(capsys, "prefill", "--preset-file", _preset(tmp_path, **{field: value}), "--seq", "1024")
    assert code == 2 and one_error(err, "is too large (at most")


def test_the_largest_sizes_fit_every_table(capsys, tmp_path):
    """Every size at its maximum, the most layers, lengths and batch of 2^40: exact, and printable."""
    big = 2**40
    sizes = {k: big for k in ("d", "V", "h_q", "h_kv", "d_h", "m")}
    path = tmp_path / "big.json"
    path.write_text(json.dumps({"name": "big", "arch": "dense", "L": spec.MAX_LAYERS, **sizes}))
    moe = tmp_path / "moe.json"
    moe.write_text(json.dumps({"name": "moe", "arch": "mla_q.moe_shared", "L": spec.MAX_LAYERS, "d": big, "V": big,
                               "h_q": big, "r_q": big, "r_kv": big, "d_nope": big, "d_rope": big, "d_v": big,
                               "E": big, "k": big, "m_e": big, "E_s": big, "m_s": big}))
    for model in (str(path), str(moe)):
        for args in (["prefill", "--seq", "1024G", "--batch", "1024G", "--convention", "both"],
                     ["decode", "--context", "1024G", "--batch", "1024G"],
                     ["train", "--seq", "1024G", "--batch", "1024G"],
                     ["generate", "--prompt", "1024G", "--new", "1024G", "--batch", "1024G"]):
            for fmt in ("table", "json"):
                extra = ["-d", "h100", "--efficiency", "0.001"] if args[0] != "train" else []
                code, out, err = run(capsys, *args, "--preset-file", model, *extra, "-f", fmt)
                assert code == 0, (args, err)
                if fmt == "json":
                    assert _strict(out)
    code, out, err = run(capsys, "presets", "show", "--preset-file", str(path))
    assert code == 0, err


# E1: an integer past Python's 4,300-digit limit anywhere in a JSON input.

def test_an_integer_of_5000_digits_is_one_error(capsys, tmp_path):
    huge = "1" + "0" * 4999
    config = tmp_path / "c.json"
    config.write_text((HF / "llama-3.1-8b.json").read_text().replace("500000.0", huge))
    assert huge in config.read_text()
    preset = tmp_path / "p.json"
    preset.write_text((PRESETS / "llama-3.1-8b.json").read_text().replace('"d": 4096', f'"d": {huge}'))
    device = tmp_path / "d.json"
    device.write_text(json.dumps({"name": "mine", "peak_flops": {"bf16": 1e15}, "mem_bw": 3e12, "mem_bytes": 1})
                      .replace('"mem_bytes": 1', f'"mem_bytes": {huge}'))
    for args in (["prefill", "--config", str(config), "--seq", "1024", "-f", "json"],
                 ["prefill", "--preset-file", str(preset), "--seq", "1024"],
                 ["prefill", "-p", "toy", "--seq", "4", "--device-file", str(device)],
                 ["memory", "-p", "toy", "--context", "4", "--device-file", str(device)],
                 ["devices", "show", "--device-file", str(device)]):
        code, _, err = run(capsys, *args)
        assert code == 2 and one_error(err, "4300 digits") and len(err) < 300, (args, err)


# G1: mfu answers a long prefill (its tiled row says why it is not worked out), naming no option it lacks.

def test_mfu_of_a_long_prefill(capsys):
    code, out, err = run(capsys, "mfu", "prefill", "-p", "llama-3.1-8b", "--seq", "1G", "--time", "1", "--device",
                         "h100", "-f", "json")
    assert code == 0, err
    rows = _strict(out)
    tiled = next(r for r in rows if r.get("convention") == "tiled")
    assert tiled["flops"] is None and "8,388,608 query tiles" in tiled["note"] and "--tile" not in tiled["note"]
    assert next(r for r in rows if r.get("convention") == "causal")["flops"] > 0
    code, out, err = run(capsys, "mfu", "prefill", "-p", "llama-3.1-8b", "--seq", "1024G", "--batch", "1024G",
                         "--time", "1e9", "--device", "h100")
    assert code == 0 and "tiled not worked out" in out and "--tile" not in out + err


# G2: an error quotes a short prefix of hostile input.

def test_errors_quote_a_short_prefix_of_hostile_input(capsys, tmp_path):
    long = "x" * 10**6
    cases = [
        ["prefill", "--config", _config(tmp_path, file="a.json", hidden_size=long), "--seq", "4"],
        ["prefill", "--config", _config(tmp_path, file="b.json", **{long: 1}), "--seq", "4"],
        ["prefill", "--preset-file", _preset(tmp_path, file="c.json", arch="a" * 60000), "--seq", "4"],
        ["prefill", "--preset-file", _preset(tmp_path, file="d.json", d=long), "--seq", "4"],
        ["prefill", "--preset-file", _preset(tmp_path, file="e.json", **{long: 1}), "--seq", "4"],
        ["prefill", "--preset-file", _preset(tmp_path, file="f.json", name=long), "--seq", "4"],
        ["prefill", "--preset-file", _preset(tmp_path, file="g.json", title="\x1b" + long), "--seq", "4"],
    ]
    device = {"name": "mine", "peak_flops": {"bf16": 1e15}, "mem_bw": 3e12, "mem_bytes": 10**9}
    for index, changes in enumerate([{long: 1}, {"mem_bw": long}, {"peak_flops": {long: 1e15, "x": long}},
                                     {"name": long}]):
        path = tmp_path / f"dev{index}.json"
        path.write_text(json.dumps({**device, **changes}))
        cases.append(["devices", "show", "--device-file", str(path)])
    dup = tmp_path / "dup.json"
    dup.write_text('{"%s": 1, "%s": 2}' % (long, long))
    cases.append(["prefill", "--preset-file", str(dup), "--seq", "4"])
    for args in cases:     # the line, less the file's own path (the test's folder is long)
        code, _, err = run(capsys, *args)
        assert code == 2 and one_error(err, "") and len(err.replace(str(tmp_path), "")) < 300, (args[:2], err[:400])
    code, _, err = run(capsys, "prefill", "--config", _config(tmp_path, file="m.json", model_type=long), "--seq", "4")
    from costcalc import hf

    families = ", ".join(hf.FAMILIES)       # the line names every family it reads, then nothing long
    assert code == 2 and one_error(err, "is not supported; supported: llama") and families in err
    assert len(err.replace(str(tmp_path), "").replace(families, "")) < 300


def test_quote_shortens_a_repr():
    assert quote("abc") == "'abc'"
    assert quote("x" * 1000) == "'" + "x" * 59 + "...(1,002 characters)"
    assert len(quote(list(range(10**5)))) < 100


# G4: crossover's batch has the bound of every other batch.

def test_crossover_batch_has_the_common_bound(capsys):
    for value in ("1099511627777", "99999999999999999999999"):
        code, _, err = run(capsys, "crossover", "-p", "llama-3.1-8b", "--device", "h100", "--batch", value)
        assert code == 2 and one_error(err, "is too large (at most 1,099,511,627,776)")
    code, out, err = run(capsys, "crossover", "-p", "llama-3.1-8b", "--device", "h100", "--batch", "1024G",
                         "-f", "json")
    assert code == 0, err
