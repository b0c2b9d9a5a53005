"""Random command lines never end in a traceback: output, or one `error:` line (warnings aside)."""
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from costcalc.cli import main

NUMBERS = ["0", "-1", "1", "4", "17", "1k", "128k", "1M", "1:8", "1:64:x2", "3:1", "1k:1M:x1", "x", "1.5",
           "1.5k", "", ",", "4,", "99999999999999", "1:1000000000", "2:2000000:x2", "1e3", " 8 "]
PRESETS = ["toy", "llama-3.1-8b", "mixtral-8x7b", "deepseek-v3", "gpt-oss-20b", "mistral-7b-v0.1",
           "toy,llama-3.1-8b", "nope", "", "toy,", ",", "toy,toy", "../toy", "TOY"]
CHOICES = {
    "--convention": ["causal", "full", "tiled", "both", "all", "diagonal", ""],
    "--logits": ["last", "all", "none"],
    "--mla": ["auto", "naive", "absorbed", "sideways"],
    "--format": ["table", "csv", "markdown", "json", "yaml"],
    "--tile": ["128", "64x32", "0", "x", "128x", "1x1", "3,4"],
    "--tools": ["all", "vllm", "vllm,fvcore", "nope", ""],
    "--hf-attention": ["eager", "sdpa", "flash"],
    "--hf-experts": ["grouped_mm", "batched_mm", "eager", "x"],
    "--time": ["1", "0", "-1", "0.5", "inf", "nan", "x"],
    "--tokens-per-s": ["1000", "0", "1e9", "x"],
    "--peak": ["989.5T", "1e15", "0", "-1", "T", "9e999", "x"],
    "--device": ["h100", "nope", ""],
}
COMMANDS = {
    "prefill": ["--seq", "--batch", "--lengths", "--cached-prefix", "--convention", "--tile", "--logits", "--mla",
                "--format", "--padded"],
    "chunked": ["--seq", "--chunk", "--prefix", "--batch", "--convention", "--tile", "--logits", "--format"],
    "decode": ["--context", "--batch", "--convention", "--mla", "--format"],
    "generate": ["--prompt", "--new", "--batch", "--convention", "--tile", "--format"],
    "train": ["--seq", "--batch", "--convention", "--tile", "--format"],
    "crossover": ["--mla", "--format"],
    "presets show": ["--format"],
    "formula": ["--arch", "--convention", "--logits", "--latex", "--format"],
    "compare": ["--seq", "--context", "--new", "--batch", "--tools", "--hf-attention", "--hf-experts", "--format"],
    "mfu": ["--seq", "--context", "--new", "--time", "--tokens-per-s", "--peak", "--device", "--tools", "--format"],
}
FLAGS = ("--padded", "--latex")


@st.composite
def command_lines(draw):
    command = draw(st.sampled_from(sorted(COMMANDS)))
    argv = command.split()
    if command == "formula":
        argv.append(draw(st.sampled_from(["prefill", "decode", "generate", "chunked", "crossover", "oops", ""])))
    elif command in ("compare", "mfu"):
        argv.append(draw(st.sampled_from(["prefill", "decode", "generate", "train", "oops"])))
        argv += ["--preset", draw(st.sampled_from(PRESETS))]
    elif command == "presets show":
        argv.append(draw(st.sampled_from(PRESETS)))
    else:
        argv += ["--preset", draw(st.sampled_from(PRESETS))]
    for option in draw(st.lists(st.sampled_from(COMMANDS[command]), max_size=5)):
        if option in FLAGS:
            argv.append(option)
        elif option == "--arch":
            argv += [option, draw(st.sampled_from(["dense", "moe", "window.moe", "mla_q.moe_shared", "x.y", "gqa"]))]
        else:
            argv += [option, draw(st.sampled_from(CHOICES.get(option, NUMBERS)))]
    return argv


@settings(max_examples=int(__import__("os").environ.get("CLI_EXAMPLES", 150)), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(argv=command_lines())
def test_no_command_line_ends_in_a_traceback(argv, capsys):
    try:
        code = main(argv)
    except BaseException as exc:   # anything escaping the one boundary is a traceback for the user
        pytest.fail(f"costcalc {' '.join(argv)!r} raised {type(exc).__name__}: {exc}")
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err
    others = [line for line in lines if not line.startswith("warning: ")]
    if code == 0:
        assert out and all(line.startswith("wrote ") for line in others), (argv, err)
    else:
        assert len(others) == 1 and others[0].startswith("error: "), (argv, err)
