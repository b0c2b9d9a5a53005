"""The papercuts a new user met (issue 22): each answered, and held here.

Every check compares two command lines that must agree (a name in another case, a number in
another notation) or reads the one error line a mistake must end in; nothing is copied from
the code's own output.
"""
import json

import pytest

from cli_run import one_error, run
from costcalc import ranges
from costcalc.errors import CostcalcError

# --- names in any case ------------------------------------------------------------------------

SAME_IN_ANY_CASE = [
    (["prefill", "-p", "llama-3.1-8b", "--seq", "64"], ["prefill", "-p", "Llama-3.1-8B", "--seq", "64"]),
    (["decode", "-p", "toy", "-t", "64", "-d", "h100"], ["decode", "-p", "TOY", "-t", "64", "-d", "H100"]),
    (["decode", "-p", "toy", "-t", "64", "--kv-dtype", "bf16", "--weight-dtype", "int4"],
     ["decode", "-p", "toy", "-t", "64", "--kv-dtype", "BF16", "--weight-dtype", "INT4"]),
    (["prefill", "-p", "toy", "--seq", "64", "--convention", "both"],
     ["prefill", "-p", "toy", "--seq", "64", "--convention", "Both"]),
    (["prefill", "-p", "toy", "--seq", "64", "--logits", "all", "--window-cache", "rolling"],
     ["prefill", "-p", "toy", "--seq", "64", "--logits", "ALL", "--window-cache", "Rolling"]),
]


@pytest.mark.parametrize("lower, other", SAME_IN_ANY_CASE)
def test_names_are_matched_in_any_case(lower, other, capsys):
    code, expected, _ = run(capsys, *lower, "-f", "json")
    assert code == 0
    code, got, err = run(capsys, *other, "-f", "JSON")
    assert code == 0, err
    assert json.loads(got) == json.loads(expected)


def test_format_names_in_any_case(capsys):
    code, csv_text, _ = run(capsys, "prefill", "-p", "toy", "--seq", "64", "-f", "csv")
    assert code == 0
    assert run(capsys, "prefill", "-p", "toy", "--seq", "64", "-f", "CSV")[1] == csv_text


def test_a_name_in_no_case_is_still_an_error(capsys):
    code, _, err = run(capsys, "prefill", "-p", "Llama-9", "--seq", "4")
    assert code == 2 and one_error(err, "unknown preset 'Llama-9'")
    code, _, err = run(capsys, "prefill", "-p", "toy", "--seq", "4", "-d", "H999")
    assert code == 2 and one_error(err, "unknown device 'H999'")
    code, _, err = run(capsys, "prefill", "-p", "toy", "--seq", "4", "--kv-dtype", "BF17")
    assert code == 2 and one_error(err, "BF17")


# --- whole numbers in scientific notation -----------------------------------------------------

@pytest.mark.parametrize("text, value", [("1e3", 1000), ("1.5e3", 1500), ("1E3", 1000), ("2e+2", 200),
                                         ("1.25e2", 125), ("1e0", 1), ("4e1k", 40 * 1024)])
def test_scientific_notation_is_a_whole_number(text, value):
    assert ranges.number(text, "--seq") == value


@pytest.mark.parametrize("text", ["1e-3", "1.5", "1.25e1", "1e"])
def test_what_is_not_whole_is_an_error_naming_it(text):
    with pytest.raises(CostcalcError, match=f"--seq: '{text}' is not a"):
        ranges.number(text, "--seq")


def test_a_huge_exponent_is_refused_unworked():
    with pytest.raises(CostcalcError, match="out of range"):
        ranges.whole("1e999999999", "--seq")


@pytest.mark.parametrize("sci, plain", [
    (["prefill", "-p", "toy", "--seq", "1e3", "--batch", "2e0"], ["prefill", "-p", "toy", "--seq", "1000", "--batch", "2"]),
    (["generate", "-p", "toy", "--prompt", "1.5e2", "--new", "1e1"], ["generate", "-p", "toy", "--prompt", "150", "--new", "10"]),
    (["decode", "-p", "toy", "-t", "64", "--weight-dtype", "int4", "--group-size", "1e3"],
     ["decode", "-p", "toy", "-t", "64", "--weight-dtype", "int4", "--group-size", "1000"]),
    (["prefill", "-p", "toy", "--seq", "64", "--tp", "2e0"], ["prefill", "-p", "toy", "--seq", "64", "--tp", "2"]),
    (["train", "-p", "llama-3.1-8b", "--seq", "64", "-b", "4", "--pp", "2", "--micro-batches", "4e0", "--schedule",
      "interleaved", "--virtual-stages", "2e0"],
     ["train", "-p", "llama-3.1-8b", "--seq", "64", "-b", "4", "--pp", "2", "--micro-batches", "4", "--schedule",
      "interleaved", "--virtual-stages", "2"]),
])
def test_integer_options_take_scientific_notation(sci, plain, capsys):
    code, expected, _ = run(capsys, *plain, "-f", "json")
    assert code == 0
    code, got, err = run(capsys, *sci, "-f", "json")
    assert code == 0, err
    assert json.loads(got) == json.loads(expected)


@pytest.mark.parametrize("option", ["--group-size", "--tp", "--dp"])
@pytest.mark.parametrize("text", ["1e-3", "1.5"])
def test_an_integer_option_names_what_is_not_whole(option, text, capsys):
    code, _, err = run(capsys, "prefill", "-p", "toy", "--seq", "64", "--weight-dtype", "int4", option, text)
    assert code == 2 and one_error(err, f"'{text}' is not a whole number") and option in err


# --- "No such option" names the option meant --------------------------------------------------

@pytest.mark.parametrize("args, line", [
    (["decode", "-p", "toy", "--seq", "4"], "No such option: --seq; decode takes --context"),
    (["generate", "-p", "toy", "--seq", "4", "--new", "2"], "No such option: --seq; generate takes --prompt"),
    (["generate", "-p", "toy", "--prompt", "4", "--output-tokens", "2"],
     "No such option: --output-tokens; generate takes --new"),
    (["prefill", "-p", "toy", "--seq", "4", "--gpu", "h100"], "No such option: --gpu; prefill takes --device"),
    (["memory", "-p", "toy", "--context", "4", "--gpu=h100"], "No such option: --gpu; memory takes --device"),
    (["prefill", "--model", "toy", "--seq", "4"], "No such option: --model; prefill takes --preset or --config"),
])
def test_no_such_option_points_to_the_option_meant(args, line, capsys):
    code, out, err = run(capsys, *args)
    assert code == 2 and out == "" and err == f"error: {line}\n"


def test_an_alias_the_command_cannot_answer_keeps_clicks_message(capsys):
    code, _, err = run(capsys, "formula", "prefill", "--gpu", "h100")
    assert code == 2 and one_error(err, "No such option: --gpu") and "takes" not in err
    code, _, err = run(capsys, "decode", "-p", "toy", "-t", "4", "--frobnicate")
    assert code == 2 and one_error(err, "No such option: --frobnicate")


def test_every_alias_points_to_options_that_exist():
    """The table names options some command takes: a renamed option fails here."""
    import typer

    from costcalc.cli.app import ALIASES, build

    def options(command):
        found = {o for p in command.params for o in getattr(p, "opts", ())}
        for sub in getattr(command, "commands", {}).values():
            found |= options(sub)
        return found

    every = options(typer.main.get_command(build()))
    assert {meant for targets in ALIASES.values() for meant in targets} <= every


# --- a preset of one's own --------------------------------------------------------------------

@pytest.fixture
def home(tmp_path, monkeypatch):
    """$COSTCALC_HOME in a temporary folder (never the real home), and a working folder."""
    monkeypatch.setenv("COSTCALC_HOME", str(tmp_path / "home"))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return tmp_path


CONFIG = "tests/data/hf-configs/llama-3.1-8b.json"


@pytest.fixture
def config(request):
    return str(request.config.rootpath / CONFIG)


def test_imported_with_user_it_is_a_preset(home, config, capsys):
    code, _, err = run(capsys, "presets", "import", config, "--name", "my-llama", "--user")
    assert code == 0 and "use it as -p my-llama" in err
    assert (home / "home" / "presets" / "my-llama.json").is_file()
    code, mine, _ = run(capsys, "prefill", "-p", "my-llama", "--seq", "64", "-f", "json")
    assert code == 0
    code, built_in, _ = run(capsys, "prefill", "-p", "llama-3.1-8b", "--seq", "64", "-f", "json")
    rows, expected = json.loads(mine), json.loads(built_in)
    assert rows[0]["preset"] == "my-llama"
    assert [{**r, "preset": None} for r in rows] == [{**r, "preset": None} for r in expected]


def test_imported_here_the_error_says_preset_file(home, config, capsys):
    code, _, err = run(capsys, "presets", "import", config, "--name", "x")
    assert code == 0 and "use it as --preset-file x.json" in err
    code, _, err = run(capsys, "prefill", "-p", "x", "--seq", "64")
    assert code == 2 and one_error(err, "give --preset-file x.json")
    code, _, err = run(capsys, "prefill", "-p", "nothing-like-it", "--seq", "64")
    assert code == 2 and one_error(err, "--preset-file PATH") and str(home / "home" / "presets") in err


def test_a_built_in_name_wins_over_the_users_folder(home, request, capsys):
    folder = home / "home" / "presets"
    folder.mkdir(parents=True)
    toy = json.loads((request.config.rootpath / "presets" / "toy.json").read_text())
    (folder / "toy.json").write_text(json.dumps({**toy, "L": 3}))   # a toy of three layers, not two
    code, out, _ = run(capsys, "prefill", "-p", "toy", "--seq", "4", "-f", "json")
    assert code == 0 and json.loads(out)[0]["total_flops"] > 0
    code, other, _ = run(capsys, "prefill", "--preset-file", str(folder / "toy.json"), "--seq", "4", "-f", "json")
    assert code == 0 and json.loads(other)[0]["total_flops"] != json.loads(out)[0]["total_flops"]


def test_a_config_given_as_a_preset_file_says_config(config, capsys):
    code, _, err = run(capsys, "prefill", "--preset-file", config, "--seq", "4")
    assert code == 2 and one_error(err, f"give it as --config {config}")


# --- compare's llm-analysis-head follows the repository's HEAD (d841e40) ----------------------

def _head(name, seq):
    from costcalc import presets
    from costcalc.peers import compare
    from costcalc.peers.base import Case

    return next(r for r in compare(Case(presets.load(name), "prefill", seq=seq), ["llm-analysis-head"]))


def test_llm_analysis_head_cites_its_commit_and_answers_an_mha_llama():
    """HEAD gates the MLP (6bsh^2 x ratio): Llama-2-7B's total is within 1% of the MHA check, so the
    tool answers; the number is what HEAD's code printed (bench/llm_analysis_head.py)."""
    from costcalc.peers.llm_analysis import LlmAnalysisHead

    assert "d841e40" in LlmAnalysisHead.source and "08d7f8f" not in LlmAnalysisHead.source
    row = _head("llama-2-7b", 1024)
    assert row["flops"] == 14_081_050_279_936, row["note"]


def test_llm_analysis_head_counts_a_plain_mlp_as_two_matrices():
    """mlp_gated_linear_units false: 4bsh^2 x ratio, so the MLP's difference from costcalc's two
    matrices (up, down) is nothing; the row differs from the wheel's 16bsh^2 by the MLP alone."""
    from costcalc import presets

    spec = presets.load("phi-2")
    assert spec.groups[0].block.ffn == "mlp"
    row = _head("phi-2", 64)
    assert row["flops"] is not None, row["note"]
    assert not any("MLP" in d["term"] for d in row["differences"]), row["differences"]


# --- Markdown is the readable table -----------------------------------------------------------

def _pipe_rows(text):
    return [[c.strip() for c in line.strip()[1:-1].split(" | ")] for line in text.splitlines() if line.startswith("| ")]


def test_markdown_is_the_terminal_table_as_a_pipe_table(tmp_path, capsys):
    args = ["decode", "-p", "llama-3.1-8b", "-t", "1k,8k", "-b", "1,32", "-d", "h100"]
    code, table, _ = run(capsys, *args)
    assert code == 0
    target = tmp_path / "x.md"
    code, out, err = run(capsys, *args, "-o", str(target))
    assert code == 0 and out == "" and "(markdown)" in err
    text = target.read_text()
    rows = _pipe_rows(text)
    titles = next(line for line in table.splitlines() if line.startswith("batch")).split()
    assert rows[0] == titles                                    # the columns the table chooses
    assert set(rows[1]) <= {"---", "---:"} and len(rows[1]) == len(titles)
    assert len(rows) == 2 + 4 and all(len(r) == len(titles) for r in rows)
    assert any(" GB" in c or " ms" in c or "FLOP" in c for r in rows[2:] for c in r)   # units, not raw numbers
    assert "Columns left out to fit 80 characters" in text and "roofline floor" in text   # the table's notes
    code, csv_text, _ = run(capsys, *args, "-f", "csv")
    assert len(csv_text.splitlines()[0].split(",")) > len(titles)


def test_markdown_wide_has_every_column_of_the_wide_table(capsys):
    args = ["prefill", "-p", "toy", "--seq", "64,128", "-d", "h100"]
    code, table, _ = run(capsys, *args, "--wide")
    code, md, err = run(capsys, *args, "-f", "markdown", "--wide")
    assert code == 0 and "does nothing" not in err
    header = _pipe_rows(md)[0]
    assert header == next(line for line in table.splitlines() if line.startswith("batch")).split()
    assert len(header) > len(_pipe_rows(run(capsys, *args, "-f", "markdown")[1])[0])
    assert "Columns left out" not in md


def test_markdown_of_one_wide_row_is_a_field_per_row_and_escapes_pipes(tmp_path, capsys, request):
    toy = json.loads((request.config.rootpath / "presets" / "toy.json").read_text())
    mine = tmp_path / "mine.json"
    mine.write_text(json.dumps({**toy, "name": "mine", "title": "a | b"}))
    code, out, _ = run(capsys, "presets", "show", "--preset-file", str(mine), "-f", "markdown")
    rows = _pipe_rows(out)
    assert code == 0 and rows[0] == ["field", "value"]
    assert ["title", "a \\| b"] in rows and ["preset", "mine"] in rows


@pytest.mark.parametrize("args", [["-p", "qwen3.5-397b-a17b", "--tp", "8", "--ep", "8"],
                                  pytest.param(["-p", "deepseek-v3.2", "--tp", "8", "--ep", "8"], marks=pytest.mark.slow)])
def test_a_generation_keeps_its_rates_in_an_80_column_table(args, capsys, monkeypatch):
    """A hybrid or sparse model on a layout: the term columns and the layout's collectives give way, TTFT,
    TPOT and the batch's tokens/s stay in the default table."""
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = run(capsys, "generate", *args, "--prompt", "4k", "--new", "1k", "--device", "h200")
    assert code == 0, err
    head = next(line for line in out.splitlines() if line.startswith("phase"))
    assert all(name in head.split() for name in ("ttft", "tpot", "tok/s")), head


@pytest.mark.parametrize("args, option", [
    (["speculate", "-p", "llama-3.1-70b", "--draft", "llama-3.1-8b", "--acceptance", "0.8", "-t", "1e30"], "--context"),
    (["speculate", "-p", "llama-3.1-70b", "--draft", "llama-3.1-8b", "--acceptance", "0.8", "-t", "1k", "-b", "1e30"],
     "--batch"),
    (["serve", "-p", "toy", "--isl", "64", "--osl", "8", "--device", "h200", "--max-batched-tokens", "1e30"],
     "--max-batched-tokens"),
])
def test_a_count_past_the_largest_is_one_error_before_any_work(args, option, capsys):
    """A length, a batch or a token budget is at most ranges.MAX_VALUE wherever it is read (speculate's
    context once ran a 1e30-token step)."""
    code, out, err = run(capsys, *args)
    assert code == 2 and out == "" and one_error(err, "is too large") and option in err
