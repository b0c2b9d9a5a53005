"""Odd input: every failure is one `error:` line (output targets: tests/test_outputs.py)."""
import json

import pytest

from cli_run import one_error, run
from costcalc import calc, presets, render, units


# --- input files ----------------------------------------------------------------------

@pytest.mark.parametrize("option", ["--preset-file", "--config"])
@pytest.mark.parametrize("content, message", [
    (b"\xff\xfe", "not UTF-8 text"),
    (b"{", "not valid JSON"),
    (b"[1, 2]", "expected a JSON object"),
])
def test_undecodable_files_are_one_line(option, content, message, tmp_path, capsys):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    code, _, err = run(capsys, "prefill", option, str(path), "--seq", "4")
    assert code == 2 and one_error(err, message), err


@pytest.mark.parametrize("data, message", [
    ({"name": "x", "L": 2, "d": 8, "V": 6}, "missing field 'arch'"),
    ({"arch": "dense", "L": 2}, "missing field 'name'"),
    ({"name": "../x", "arch": "dense"}, "is not a preset name"),
    ({"name": "x", "d": 8, "V": 6, "layers": [{"count": 1}]}, "missing field 'arch'"),
])
def test_missing_fields_are_named(data, message, tmp_path, capsys):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    code, _, err = run(capsys, "prefill", "--preset-file", str(path), "--seq", "4")
    assert code == 2 and one_error(err, message), err


# --- sizes ----------------------------------------------------------------------------

def test_a_huge_chunk_schedule_is_refused_before_it_is_built(capsys):
    code, _, err = run(capsys, "chunked", "-p", "toy", "--seq", "1099511627776", "--chunk", "1")
    assert code == 2 and one_error(err, "at most 10,000,000")


def test_a_long_table_is_refused_and_csv_is_suggested(capsys, tmp_path):
    code, _, err = run(capsys, "prefill", "-p", "toy", "--seq", "1:10001")
    assert code == 2 and one_error(err, "-f csv -o FILE")
    target = tmp_path / "long.csv"
    code, _, err = run(capsys, "prefill", "-p", "toy", "--seq", "1:10001", "-o", str(target))
    assert code == 0 and len(target.read_text().splitlines()) == 10002


def test_a_chunk_schedule_of_many_chunks_is_exact_and_fast(capsys, tmp_path):
    spec = presets.load("toy")
    rows = calc.rows(calc.chunked_table(spec, 300, 1, prefix=7, batch=2, logits="last"))
    assert len(rows) == 302
    for i in (0, 150, 299):
        expected = calc.cached_prefill(spec, 1, 7 + i, 2, logits="last")
        if i < 299:   # only the last chunk runs the LM head
            assert rows[i]["lm_head_flops"] == 0
            assert rows[i]["attention_flops"] == expected["attention_flops"]
        else:
            assert rows[i]["total_flops"] == expected["total_flops"]
    assert rows[-2]["total_flops"] == rows[-1]["total_flops"]   # causal: chunking keeps the total


def test_json_streams_the_text_json_dumps_writes():
    rows = [{"a": 1, "b": None}, {"a": 2**70, "b": 'x"y'}]
    assert render.render(rows, "json") == json.dumps(rows, indent=2) + "\n"
    assert render.render([], "json") == "[]\n"


def test_units_past_the_largest_prefix_and_small_parameter_counts():
    assert units.flops(262144 * 10**24) == "2.621e+29 FLOP"
    assert units.flops(15_470_000_000_000) == "15.47 TFLOP"
    assert units.params(1232) == "1.23K" and units.params(512) == "512"
    assert units.params(8_030_261_248) == "8.03B"


# --- presets --------------------------------------------------------------------------

@pytest.mark.parametrize("name, message", [
    ("", "is not a preset name"),
    ("../x", "is not a preset name"),
    (".hidden", "is not a preset name"),
    ("a/b", "is not a preset name"),
])
def test_presets_import_validates_the_name(name, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = tmp_path.parent / f"{tmp_path.name}-cfg.json"
    config.write_text((presets_root() / "tests/data/hf-configs/llama-3.1-8b.json").read_text())
    code, _, err = run(capsys, "presets", "import", str(config), "--name", name)
    assert code == 2 and one_error(err, message)
    assert list(tmp_path.iterdir()) == []


def test_presets_import_refuses_to_overwrite_without_force(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = presets_root() / "tests/data/hf-configs/llama-3.1-8b.json"
    (tmp_path / "mine.json").write_text("keep me")
    code, _, err = run(capsys, "presets", "import", str(config), "--name", "mine")
    assert code == 2 and one_error(err, "pass --force")
    assert (tmp_path / "mine.json").read_text() == "keep me"
    code, _, err = run(capsys, "presets", "import", str(config), "--name", "mine", "--force")
    assert code == 0 and json.loads((tmp_path / "mine.json").read_text())["name"] == "mine"


def presets_root():
    from pathlib import Path

    return Path(__file__).resolve().parents[1]


def test_presets_show_takes_the_name_as_an_argument_or_option(capsys):
    code, _, err = run(capsys, "presets", "show")
    assert code == 2 and one_error(err, "costcalc presets show NAME")
    for args in (["toy"], ["--preset", "toy"], ["-p", "toy"]):
        code, out, err = run(capsys, "presets", "show", *args)
        assert code == 0 and "total_params" in out, err


def test_provenance_names_files_in_this_repository_or_public_urls():
    root = presets_root()
    for spec in presets.load_all():
        for key, value in spec.source.items():
            for token in str(value).split():
                token = token.strip("(),;'\"")
                if token.startswith("shared/") or "/shared/" in token:
                    raise AssertionError(f"{spec.name}: source.{key} cites {token}, which is not in the repository")
                if token.endswith((".json", ".txt", ".md")) and not token.startswith("http"):
                    assert (root / token).exists(), f"{spec.name}: source.{key} names {token}, not in the repository"


# --- options that do nothing, help -----------------------------------------------------

@pytest.mark.parametrize("args, warning", [
    (["prefill", "-p", "toy", "--seq", "4", "--tile", "64"], "--tile 64 does nothing"),
    (["decode", "-p", "toy", "--context", "4", "--mla", "naive"], "--mla naive does nothing"),
    (["prefill", "-p", "toy", "--seq", "4", "--device", "h100", "--group-size", "64"], "--group-size does nothing"),
    (["prefill", "-p", "mixtral-8x7b", "--seq", "4", "--routing", "worst"], "--routing does nothing"),
    (["decode", "-p", "toy", "--context", "4", "--device", "h100", "--routing", "worst"], "has no MoE layers"),
    (["memory", "-p", "toy", "-t", "4", "--device", "h100", "--routing", "worst"], "has no MoE layers"),
    (["prefill", "-p", "toy", "--seq", "4", "-f", "csv", "--wide"], "--wide does nothing with csv"),
    (["formula", "prefill", "--latex", "-f", "json"], "--latex does nothing with json"),
    (["crossover", "-p", "toy", "--batch", "4"], "--batch does nothing"),
    (["memory", "-p", "llama-3.1-8b", "-b", "1", "-t", "1k", "--device", "h100", "--window-cache", "whole"],
     "--window-cache whole does nothing"),
])
def test_options_that_do_nothing_warn(args, warning, capsys):
    code, out, err = run(capsys, *args)
    assert code == 0 and out and err.strip() == f"warning: {err.strip().removeprefix('warning: ')}"
    assert warning in err


def test_version(capsys):
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.startswith("costcalc ")


COMMANDS = ["prefill", "chunked", "decode", "generate", "train", "formula", "crossover", "plot", "verify", "compare", "mfu",
            "presets", "presets show", "presets import", "memory", "devices", "devices show"]


@pytest.mark.parametrize("command", COMMANDS)
def test_help_fits_80_columns_and_has_an_example(command, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run(capsys, *command.split(), "--help")
    assert code == 0
    assert max(map(len, out.splitlines())) <= 80, max(out.splitlines(), key=len)
    assert "Example: costcalc" in " ".join(out.split()), command


@pytest.mark.parametrize("args", [
    ["prefill", "-p", "deepseek-v3,mixtral-8x7b", "--seq", "1k,128k", "--convention", "all"],
    ["decode", "-p", "llama-3.1-405b", "--context", "1k,1M", "--batch", "1,256"],
    ["generate", "-p", "qwen1.5-moe-a2.7b", "--prompt", "1k", "--new", "100"],
    ["train", "-p", "gpt-oss-120b", "--seq", "8k", "--convention", "both"],
    ["chunked", "-p", "deepseek-v3", "--seq", "10k", "--chunk", "3k", "--prefix", "100k"],
    ["crossover", "-p", "gemma-3-12b,llama-3.1-8b"],
    ["presets"],
])
def test_default_tables_fit_80_columns(args, capsys):
    code, out, err = run(capsys, *args)
    assert code == 0, err
    assert max(map(len, out.splitlines())) <= 80, max(out.splitlines(), key=len)
    code, wide, _ = run(capsys, *args, "--wide")
    assert code == 0 and len(wide) >= len(out) - 200


def test_a_narrow_table_says_what_it_left_out(capsys):
    _, out, _ = run(capsys, "prefill", "-p", "mixtral-8x7b", "--seq", "4k")
    text = " ".join(out.split())
    assert "Columns left out to fit 80 characters: attn_proj, router, experts" in text
    _, wide, _ = run(capsys, "prefill", "-p", "mixtral-8x7b", "--seq", "4k", "--wide")
    assert "experts" in wide.splitlines()[2] and "left out" not in wide


def test_a_reader_that_stops_early_ends_the_output_quietly():
    """`costcalc ... | head -1`: no error, no traceback, as Unix tools behave."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "costcalc", "prefill", "-p", "toy", "--seq", "1:200000", "-f", "csv"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = proc.stdout.readline()
    proc.stdout.close()                         # the reader goes away
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0 and first.startswith(b"preset,") and err == ""
