"""The command line through its one boundary (costcalc.cli.main)."""
import io
import json
import subprocess
import sys

import pandas as pd
import pytest

from cli_run import run
from costcalc import calc, presets
from costcalc.cli import main


def test_prefill_table_states_conventions(capsys):
    code, out, err = run(capsys, "prefill", "--preset", "llama-3.1-8b", "--seq", "1024,4096", "--convention", "both")
    assert code == 0, err
    assert "TFLOP" in out and "causal = legal query-key pairs" in out and "Not counted" in out
    data = [line.split()[0] for line in out.splitlines() if line.endswith("TFLOP")]
    assert data == ["causal", "full", "causal", "full"]


def test_csv_round_trips_exact_integers(capsys):
    code, out, _ = run(capsys, "prefill", "-p", "llama-3.1-405b", "--seq", "131072", "--batch", "64", "-f", "csv")
    assert code == 0
    df = pd.read_csv(io.StringIO(out), dtype=str)
    expected = calc.prefill(presets.load("llama-3.1-405b"), 131072, 64)
    assert int(df.loc[0, "total_flops"]) == expected["total_flops"] > 2**63
    for col in ("preset", "workload", "convention", "batch", "seq", "linear_flops",
                "attention_flops", "lm_head_flops", "total_flops"):
        assert col in df.columns


def test_json_and_csv_share_columns_and_markdown_the_tables(capsys):
    args = ["generate", "-p", "mixtral-8x7b", "--prompt", "512", "--new", "64,128"]
    _, out_json, _ = run(capsys, *args, "-f", "json")
    _, out_csv, _ = run(capsys, *args, "-f", "csv")
    _, out_md, _ = run(capsys, *args, "-f", "markdown")
    _, out_table, _ = run(capsys, *args)
    records = json.loads(out_json)
    assert isinstance(records, list) and len(records) == 6
    assert [r["phase"] for r in records[:3]] == ["prefill", "decode", "total"]
    csv_cols = list(pd.read_csv(io.StringIO(out_csv)).columns)
    assert list(records[0]) == csv_cols
    md_cols = [c.strip() for c in next(l for l in out_md.splitlines() if l.startswith("| ")).strip("|").split("|")]
    table_cols = next(l for l in out_table.splitlines() if l.startswith("phase")).split()
    assert md_cols == table_cols and len(md_cols) < len(csv_cols)   # the table's columns, not every one
    assert records[2]["total_flops"] == records[0]["total_flops"] + records[1]["total_flops"]


def test_big_integers_stay_exact_in_csv_and_json_and_read_in_units_in_markdown(capsys):
    args = ["prefill", "-p", "llama-3.1-405b", "--seq", "131072", "--batch", "64"]
    expected = calc.prefill(presets.load("llama-3.1-405b"), 131072, 64)["total_flops"]
    assert expected > 2**63
    _, out, _ = run(capsys, *args, "-f", "json")
    assert json.loads(out)[0]["total_flops"] == expected
    _, out, _ = run(capsys, *args, "-f", "markdown")
    assert str(expected) not in out and f"| {expected / 1e18:.4g} EFLOP |" in out


def test_output_file_format_from_suffix(tmp_path, capsys):
    target = tmp_path / "decode.json"
    code, out, err = run(capsys, "decode", "-p", "toy", "--context", "4,8", "--batch", "2", "-o", str(target))
    assert code == 0 and out == ""
    rows = json.loads(target.read_text())
    assert [r["context"] for r in rows] == [4, 8]
    assert all(r["total_flops_per_token"] * 2 == r["total_flops"] for r in rows)


def test_cached_prefix_and_varlen(capsys):
    _, out, _ = run(capsys, "prefill", "-p", "toy", "--seq", "3", "--cached-prefix", "0,5", "-f", "json")
    rows = json.loads(out)
    assert [r["prefix"] for r in rows] == [0, 5]
    assert rows[0]["total_flops"] == calc.prefill(presets.load("toy"), 3)["total_flops"]
    _, out, _ = run(capsys, "prefill", "-p", "toy", "--lengths", "100,2000,512", "-f", "json")
    _, out_pad, _ = run(capsys, "prefill", "-p", "toy", "--lengths", "100,2000,512", "--padded", "-f", "json")
    packed, padded = json.loads(out)[0], json.loads(out_pad)[0]
    assert packed["batch"] == 3 and packed["lengths"] == "100,2000,512"
    assert padded["total_flops"] == calc.prefill(presets.load("toy"), 2000, 3)["total_flops"]
    assert packed["total_flops"] < padded["total_flops"]


def test_chunked_rows_and_note(capsys):
    code, out, _ = run(capsys, "chunked", "-p", "toy", "--seq", "10", "--chunk", "4")
    assert code == 0
    assert "chunk 3" in out and "unchunked" in out
    out = " ".join(out.split())   # notes are wrapped to the table width
    assert "causal, seq 10, chunk 4: the chunked total equals the unchunked prefill exactly." in out
    assert "full, seq 10, chunk 4: chunking changes the total by" in out


def test_train_beside_6p(capsys):
    _, out, _ = run(capsys, "train", "-p", "llama-3.1-8b", "--seq", "4096", "-f", "json")
    row = json.loads(out)[0]
    assert row["total_flops"] > row["rule_6p_flops"] and row["ratio_to_6p"] > 1


def test_crossover_and_formula(capsys):
    code, out, _ = run(capsys, "crossover", "-p", "llama-3.1-8b", "-f", "json")
    rows = json.loads(out)
    assert code == 0 and rows[0]["quantity"] == "decode_t_equal"
    code, out, _ = run(capsys, "formula", "decode", "--arch", "moe")
    assert code == 0 and "attention = 4*B*L*d_q*(T + 1)" in out and "linear    = 2*B*P_lin" in out
    code, out, _ = run(capsys, "formula", "prefill", "--latex")
    assert code == 0 and "P_{lin}" in out


def test_presets_list_and_show(capsys):
    code, out, _ = run(capsys, "presets", "-f", "json")
    names = [r["preset"] for r in json.loads(out)]
    assert code == 0 and names == presets.names()
    code, out, _ = run(capsys, "presets", "show", "qwen3-30b-a3b")
    assert code == 0 and "source.repo" in out and "Qwen/Qwen3-30B-A3B" in out


BAD = [
    (["prefill", "--preset", "llama3-8b", "--seq", "10"], "unknown preset 'llama3-8b'; did you mean"),
    (["prefill", "--preset", "toy", "--seq", "0"], "--seq: 0 is not positive"),
    (["prefill", "--preset", "toy", "--seq", "-5"], "--seq: -5 is not positive"),
    (["prefill", "--preset", "toy", "--seq", "ten"], "--seq: 'ten' is not a number"),
    (["prefill", "--preset", "toy", "--seq", "1e30"], "--seq: '1e30' is too large"),
    (["prefill", "--preset", "toy", "--seq", "1e-3"], "--seq: '1e-3' is not a whole number"),
    (["prefill", "--preset", "toy", "--seq", "4", "-f", "xml"], "'xml' is not one of 'table', 'csv'"),
    (["prefill", "--preset", "toy", "--seq", "4", "--efficiency", "0"], "compute efficiency must be between 0.001 and 1"),
    (["prefill", "--preset", "toy"], "give --seq"),
    (["prefill", "--seq", "10"], "no model"),
    (["prefill", "--preset", "toy", "--preset-file", "x.json", "--seq", "10"], "give one of --preset"),
    (["prefill", "--preset", "toy", "--seq", "10", "--lengths", "1,2"], "--lengths and --seq conflict"),
    (["prefill", "--preset", "toy", "--seq", "10", "--padded"], "--padded applies only with --lengths"),
    (["chunked", "--preset", "toy", "--seq", "10", "--chunk", "11"], "chunk 11 is larger than the prompt"),
    (["decode", "--preset", "toy", "--context", "0"], "--context: 0 is not positive"),
    (["generate", "--preset", "toy", "--prompt", "4", "--new", "0"], "--new: 0 is not positive"),
    (["prefill", "--preset", "toy", "--seq", "4", "--convention", "diagonal"], "diagonal"),
    (["formula", "sideways"], "unknown workload 'sideways'"),
    (["prefill", "--preset", "toy", "--seq", "4", "--bogus"], "No such option"),
]


@pytest.mark.parametrize("args, message", BAD)
def test_bad_input_is_one_line_and_leaves_no_file(args, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    target = tmp_path / "out.csv"
    code, out, err = run(capsys, *args, "--output", str(target)) if args[0] != "formula" else run(capsys, *args)
    assert code == 2
    assert message in err and "Value error" not in err
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: ")
    assert "Traceback" not in err and out == ""
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("change, message", [
    ({"k": 9}, "k=9 experts per token exceeds E=8"),
    ({"h_kv": 5}, "h_q=32 is not divisible by h_kv=5"),
    ({"m_e": -1}, "field 'm_e' must be a positive integer"),
])
def test_bad_preset_file_from_cli(change, message, tmp_path, capsys):
    data = {**presets.load("mixtral-8x7b").to_dict(), **change}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    code, out, err = run(capsys, "prefill", "--preset-file", str(path), "--seq", "8")
    assert code != 0 and message in err and len(err.strip().splitlines()) == 1


def test_console_entry_point_and_no_torch():
    """A real process: the calculator runs without importing torch (or matplotlib)."""
    code = ("import sys, runpy; sys.argv = ['costcalc', 'generate', '-p', 'toy', '--prompt', '4', '--new', '4'];"
            "\ntry: runpy.run_module('costcalc', run_name='__main__')\nexcept SystemExit as e: assert e.code == 0, e.code"
            "\nassert 'torch' not in sys.modules, 'torch imported'; print('NO_TORCH')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "NO_TORCH" in proc.stdout and "total" in proc.stdout


def test_ranges_and_several_presets_side_by_side(capsys):
    code, out, err = run(capsys, "prefill", "--preset", "llama-3.1-8b,mixtral-8x7b", "--seq", "1k:4k:x2",
                         "--batch", "1,8", "--convention", "both", "--format", "json")
    assert code == 0, err
    rows = json.loads(out)
    assert len(rows) == 2 * 3 * 2 * 2
    assert [r["preset"] for r in rows[:12]] == ["llama-3.1-8b"] * 12
    assert [(r["seq"], r["batch"], r["convention"]) for r in rows[:4]] == [
        (1024, 1, "causal"), (1024, 1, "full"), (1024, 8, "causal"), (1024, 8, "full")]
    assert list(rows[0])[6:14] == ["attn_proj_flops", "ffn_flops", "router_flops", "experts_flops",
                                   "linear_flops", "attention_flops", "lm_head_flops", "total_flops"]
    spec = presets.load("mixtral-8x7b")
    for r in rows[12:]:
        assert r["ffn_flops"] is None
        assert {k: v for k, v in r.items() if v is not None} == calc.prefill(spec, r["seq"], r["batch"], r["convention"])


def test_a_large_sweep_writes_every_point_exactly(capsys, tmp_path):
    target = tmp_path / "sweep.csv"
    code, out, err = run(capsys, "decode", "--preset", "llama-3.1-405b", "--context", "1:6000",
                         "--batch", "1,256", "--output", str(target))
    assert code == 0, err
    assert "wrote 12000 rows (csv)" in err
    frame = pd.read_csv(target, dtype=str)
    assert len(frame) == 12000
    spec = presets.load("llama-3.1-405b")
    for i in (0, 1, 5999, 11999):
        row = frame.iloc[i]
        expected = calc.decode(spec, int(row["context"]), int(row["batch"]))
        assert int(row["total_flops"]) == expected["total_flops"]
        assert int(row["total_flops_per_token"]) == expected["total_flops_per_token"]


def test_an_unknown_preset_in_a_list_is_named(capsys):
    code, out, err = run(capsys, "prefill", "--preset", "llama-3.1-8b,llama-9", "--seq", "8")
    assert code == 2 and out == ""
    assert err.startswith("error: unknown preset 'llama-9'") and len(err.splitlines()) == 1


def test_crossover_of_several_presets_says_never_where_it_is(capsys):
    code, out, err = run(capsys, "crossover", "--preset", "llama-3.1-8b,mistral-7b-v0.1", "--format", "json")
    assert code == 0, err
    rows = json.loads(out)
    assert [r["preset"] for r in rows] == ["llama-3.1-8b"] * 3 + ["mistral-7b-v0.1"] * 3
    assert rows[0]["exact"] == "26624" and rows[3]["exact"] == "never" and rows[3]["tokens"] is None


def test_decode_takes_the_tile_of_the_tiled_convention(capsys):
    """A decode step is one query tile: only where a window starts mid-tile does the tile matter."""
    spec = presets.load("gemma-3-12b")
    got = {}
    for size in (64, 1000):
        code, out, _ = run(capsys, "decode", "-p", "gemma-3-12b", "-t", "10000", "--convention", "tiled",
                           "--tile", str(size), "-f", "json")
        row = json.loads(out)[0]
        assert code == 0 and row["tile"] == f"{size}x{size}"
        assert row["attention_flops"] == calc.decode(spec, 10000, convention="tiled", tile=(size, size))["attention_flops"]
        got[size] = row["attention_flops"]
    assert got[64] < got[1000]


def test_formula_says_the_logits_a_workload_runs_and_fits_its_header(capsys):
    code, out, _ = run(capsys, "formula", "train")
    assert code == 0 and "logits all" in out and "logits last" not in out   # training: every position
    assert "lm_head   = 6*B*S*V*d" in out
    code, out, _ = run(capsys, "formula", "chunked")
    assert code == 0 and all(len(line) <= 80 for line in out.splitlines()[:3])


def test_the_built_in_lists_as_tables_put_each_field_in_its_column(capsys):
    from costcalc import devices, units

    code, out, _ = run(capsys, "devices")
    lines = out.splitlines()
    assert code == 0 and lines[0].split() == ["device", "bf16", "fp8", "memory", "bandwidth"]
    h100 = devices.load("h100")
    cells = [units.flops(h100.peak_flops["bf16"], "FLOP/s"), units.flops(h100.peak_flops["fp8"], "FLOP/s"),
             units.nbytes(h100.mem_bytes), units.nbytes(h100.mem_bw) + "/s"]
    row = next(line for line in lines if line.startswith("h100 "))
    assert [c for c in cells if c in row] == cells and row.index(cells[2]) < row.index(cells[3])
    code, out, _ = run(capsys, "presets", "--wide")    # every column (at 80 the widest layer kinds push some out)
    lines = out.splitlines()
    assert code == 0 and lines[0].split()[:3] == ["preset", "title", "layers"]
    spec = presets.load("mixtral-8x7b")
    params = calc.parameters(spec)
    row = next(line for line in lines if line.startswith("mixtral-8x7b "))
    expected = ["32 x gqa.moe", units.params(params["total_params"]), units.params(params["active_params"])]
    assert all(c in row for c in expected) and row.index(expected[1]) < row.index(expected[2])
    code, out, _ = run(capsys, "presets", "-f", "json")
    assert json.loads(out)[0].keys() >= {"preset", "arch", "L", "total_params", "active_params"}   # every field
