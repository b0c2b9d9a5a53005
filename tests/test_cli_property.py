"""Random command lines never end in a traceback: output, or one `error:` line (warnings aside).

Every command line either succeeds (exit 0, its output on stdout or in the file it names) or
fails with exit 2 and one ``error:`` line on stderr, leaving no file behind (and an existing
one as it was). An option the command does not take is a usage error, exit 2, like any other.

Arguments that name files are placeholders, made real per example: ``@in/NAME`` is a file of
``INPUTS`` (written once into tmp_path), ``@hf/NAME`` a Hugging Face config of
tests/data/hf-configs, ``@out/NAME`` a path in the example's own empty output folder (which is
also the working directory, so a command writing "here" writes there too).
"""
import itertools
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

import hostile
from costcalc.cli import main
from costcalc.vocab import Dtype, MlaForm, Routing, WindowCache

HF_CONFIGS = Path(__file__).parent / "data" / "hf-configs"

# Each argument's values: (good, bad). A value is mostly drawn from the good ones, so that most
# lines get past their first bad value and run (bytes, time, files); lengths stay small.
LENGTHS = (["1", "4", "17", "1k", "1,4", "4,17", "1e3", "1.6e1"],
           ["0", "-1", "128k", "1M", "1:8", "1:64:x2", "3:1", "1k:1M:x1", "x", "1.5", "1.5k", "", ",", "4,",
            "99999999999999", "1:1000000000", "2:2000000:x2", "1e-3", "1.5e0", " 8 "])
PRESETS = (["toy", "llama-3.1-8b", "mixtral-8x7b", "deepseek-v3", "gpt-oss-20b", "toy,llama-3.1-8b", "TOY", "Llama-3.1-8B"],
           ["mistral-7b-v0.1", "nope", "", "toy,", ",", "toy,toy", "../toy", "../TOY"])
DEVICES = (["a100", "b200", "h100", "h200", "l40s", "mi300x", "H100"], ["nope", "", " ", "h100 ", "../h100", "h100,a100"])

# Input files, written once per test run under tmp_path/in.
DEVICE = ('{"name": "mine", "peak_flops": {"bf16": 1e15, "fp8": 2e15, "int8": 2e15}, '
          '"mem_bw": 3e12, "mem_bytes": 80000000000}')
INPUTS = {
    "device.json": DEVICE.encode(),
    "device-titled.json": DEVICE.replace('"mine"', '"mine", "title": "Mine \\u00e9", "source": {"url": "x"}')
                                .encode(),
    "device-malformed.json": b'{"name": "mine", "peak_flops": {"bf16": 1e15',
    "device-latin1.json": DEVICE.replace('"mine"', '"caf\xe9"').encode("latin-1"),
    "device-empty.json": b"",
    "device-list.json": b"[1, 2]",
    "device-unknown-field.json": DEVICE.replace('"mine"', '"mine", "sparsity": 2').encode(),
    "device-missing-field.json": b'{"name": "mine", "peak_flops": {"bf16": 1e15}, "mem_bw": 3e12}',
    "device-zero-peak.json": DEVICE.replace("1e15", "0").encode(),
    "device-nan.json": DEVICE.replace("3e12", "NaN").encode(),
    "device-bad-name.json": DEVICE.replace('"mine"', '"../mine"').encode(),
    "device-float-bytes.json": DEVICE.replace("80000000000", "8e10").encode(),
    "device-fp64-only.json": DEVICE.replace('"bf16": 1e15, "fp8": 2e15, "int8": 2e15', '"fp64": 1e12').encode(),
    "device-infinite-bandwidth.json": DEVICE.replace("3e12", "Infinity").encode(),
    "device-one-byte.json": DEVICE.replace("80000000000", "1").encode(),
    "config-malformed.json": b'{"model_type": "llama", "hidden_size": 4096,',
    "config-latin1.json": '{"model_type": "llama", "name_or_path": "caf\xe9"}'.encode("latin-1"),
    "config-empty.json": b"",
    "config-list.json": b"[1, 2]",
    "config-unknown-field.json": (HF_CONFIGS / "llama-3.1-8b.json").read_text(encoding="utf-8")
                                 .replace("{", '{"frobnication": 3, ', 1).encode(),
    "config-no-model-type.json": b'{"hidden_size": 64, "num_hidden_layers": 2}',
    "preset-toy.json": (Path(__file__).parent.parent / "presets" / "toy.json").read_bytes(),
}
MISSING = ["@in/missing.json", "@in", ""]
GOOD_DEVICE_FILES = ["@in/device.json", "@in/device-titled.json", "@in/device-infinite-bandwidth.json",
                     "@in/device-one-byte.json"]
DEVICE_FILES = (GOOD_DEVICE_FILES, [f"@in/{name}" for name in INPUTS if name.startswith("device")
                                    and f"@in/{name}" not in GOOD_DEVICE_FILES] + MISSING)
CONFIGS = ([f"@hf/{name}.json" for name in ("llama-3.1-8b", "mixtral-8x7b", "deepseek-v3", "gpt-oss-20b",
                                             "gemma-3-12b", "qwen3-30b-a3b", "llama-4-scout-17b-16e")],
           [f"@in/{name}" for name in INPUTS if name.startswith("config")] + MISSING)
PRESET_FILES = (["@in/preset-toy.json"], ["@in/device.json", "@in/config-malformed.json", "@in/config-latin1.json",
                                          "@hf/llama-3.1-8b.json"] + MISSING)
# @out/old.json exists in every output folder before the command runs.
OUTPUTS = (["-", "@out/r.csv", "@out/r.json", "@out/r.md", "@out/r.txt", "@out/r", "@out/old.json"],
           ["", " ", "@out", "@out/", "@out/none/r.csv", "@in/device.json/r.csv"])
OLD = b'{"old": true}\n'


def _choice(values, *bad):
    """A choice's values (and the first in capitals: names are matched in any case); bad ones."""
    first = next(iter(values)).value
    return [v.value for v in values] + [first.upper()], ["", "x", values.__name__.upper(), *bad]


VALUES = {
    "--preset": PRESETS,
    "--device": DEVICES,
    "--device-file": DEVICE_FILES,
    "--config": CONFIGS,
    "--preset-file": PRESET_FILES,
    "--output": OUTPUTS,
    "--convention": (["causal", "full", "tiled", "both", "all"], ["diagonal", ""]),
    "--logits": (["last", "all"], ["none"]),
    "--mla": _choice(MlaForm, "sideways"),
    "--window-cache": _choice(WindowCache),
    "--draft": (["mtp", "MTP"], ["", "eagle"]),
    "speculate --draft": (["mtp", "llama-3.1-8b"], ["", "eagle"]),
    "--draft-tokens": (["1", "2", "4"], ["0", "-1", "x", "", "1000"]),
    "--draft-tp": (["1"], ["0", "-1", "x", ""]),
    "--acceptance": (["0.8", "0.5", "0.8,0.7", "0"], ["1", "-0.1", "x", "", "1.5", "nan", "0.8,"]),
    "--kmax": (["1", "4"], ["0", "-1", "x", "", "1000"]),
    "--tp": (["1", "2", "8", "2e0"], ["0", "-1", "x", "", "3", "1.5", "1e-3"]),
    "--ep": (["1", "2", "8"], ["0", "-1", "x", ""]),
    "--pp": (["1", "2", "4"], ["0", "-1", "x", ""]),
    "--dp": (["1", "2"], ["0", "-1", "x", ""]),
    "--micro-batches": (["1", "2", "4"], ["0", "-1", "x", ""]),
    "--overlap": (["none", "full", "NONE"], ["", "x", "partial"]),
    "--zero": (["0", "1", "3"], ["4", "-1", "x", ""]),
    "--recompute": (["none", "selective", "full", "FULL"], ["", "some"]),
    "--optimizer": (["adam"], ["", "sgd"]),
    "--schedule": (["1f1b", "gpipe", "interleaved"], ["", "zb", "GPIPE"]),
    "--virtual-stages": (["1", "2"], ["0", "-1", "x", ""]),
    "--routing": _choice(Routing),
    "--weight-dtype": ([d.value for d in Dtype] + ["fp8-block128", "fp8-tensor", "nvfp4", "mxfp4", "gptq-int4-g128",
                                                   "awq-int4-g32", "ct-int4-g32-asym", "fp4-block1x32-ue8m0", "BF16", "INT4"],
                       ["", "x", "DTYPE", "int2", "fp8-block0", "gptq-int3-g128", "fp4-block2x32"]),
    "--kv-dtype": _choice(Dtype, "fp4"),
    "--act-dtype": _choice(Dtype, "tf32", "fp64_tensor"),
    "--state-dtype": _choice(Dtype, "fp12"),
    "--index-dtype": _choice(Dtype, "fp9"),
    "--group-size": (["128", "32", "1", "3", "99999999999999999999", "1e3"], ["0", "-1", "-128", "1e-3", "x", ""]),
    "--efficiency": (["0.7", "0.7,0.8", "1", "1,1", "0.001"],
                     ["1.5", "0.5,1.5", "0", "-0.5", "x", "", "0.7,", ",0.8", "0.7,0.8,0.9", "nan", "inf", "1e-300",
                      "1e-320", "1,5e-324"]),
    # measured needs the optional tables (a one-line error without them): only roofline is always good
    "--timing": (["roofline", "Roofline"], ["", "fast", "floor"]),
    "--engine": (["vllm", "trtllm", "sglang", "VLLM"], ["", "tensorrt", "x"]),
    "--engine-version": (["0.24.0", "1.3.0rc20"], ["", " "]),
    "--reserve": (["0.1", "0", "0.99"], ["1", "-0.1", "1.5", "nan", "x", ""]),
    "--format": (["table", "csv", "markdown", "json", "CSV"], ["yaml"]),
    "--tile": (["128", "64x32", "1x1"], ["0", "x", "128x", "3,4"]),
    "--tools": (["all", "vllm", "vllm,fvcore"], ["nope", ""]),
    "--hf-attention": (["eager", "sdpa"], ["flash"]),
    "--hf-experts": (["grouped_mm", "batched_mm", "eager"], ["x"]),
    "--time": (["1", "0.5", "1e-9"], ["0", "-1", "inf", "nan", "x", "1e-320", "2e9"]),
    "--tokens-per-s": (["1000", "1e9"], ["0", "x", "5e-324", "1e16"]),
    "--peak": (["989.5T", "1e15"], ["0", "-1", "T", "9e999", "x", "1e-300", "5e-324", "1e22"]),
    "--name": (["mine", "my-model.v2", "toy"], ["", "../evil", "a/b", ".hidden", "-dash", "x" * 101]),
    "--title": (["A title", "caf\xe9"], [""]),
    "--arch": (["dense", "moe", "window.moe", "mla_q.moe_shared"], ["x.y", "gqa"]),
    "formula": (["prefill", "decode", "generate", "chunked", "crossover"], ["oops", ""]),
    "workload": (["prefill", "decode", "generate", "train"], ["oops"]),
}
# Kept out of the pool, as slow: `formula chunked --convention tiled` (or all) derives for 15 s;
# a long prompt in short chunks is many rows, each slow on a device.
SLOW = "formula chunked --convention"
VALUES[SLOW] = (["causal", "full", "both"], ["diagonal", ""])
VALUES["chunked --seq"] = (["4", "17", "64"], ["0", "-1", "x", "", "1k", "1.5k", "3:1", "99999999999999"])
VALUES["chunked --chunk"] = (["4", "17", "512"], ["0", "-1", "x", "", "1.5k", "3:1", "99999999999999"])
TIMING = ["--timing", "--engine", "--engine-version"]      # with every --device
TIME = ["--device", "--device-file", "--weight-dtype", "--kv-dtype", "--act-dtype", "--group-size", "--routing",
        "--efficiency", "--state-dtype", "--index-dtype", *TIMING]
OUT = ["--format", "--output", "--wide"]
LAYOUT = ["--tp", "--ep", "--pp", "--dp", "--sp", "--micro-batches", "--overlap"]
COMMANDS = {   # each command's options, as its --help lists them (the model and positional ones aside)
    "prefill": ["--seq", "--batch", "--lengths", "--cached-prefix", "--convention", "--tile", "--logits", "--mla",
                "--window-cache", "--padded", *LAYOUT, *TIME, *OUT],
    "chunked": ["--seq", "--chunk", "--prefix", "--batch", "--convention", "--tile", "--logits", "--mla",
                "--window-cache", *LAYOUT, *TIME, *OUT],
    "decode": ["--context", "--batch", "--convention", "--tile", "--mla", "--window-cache", "--draft",
               "--draft-tokens", "--acceptance", "--draft-tp", *LAYOUT, *TIME, *OUT],
    "generate": ["--prompt", "--new", "--batch", "--convention", "--tile", "--logits", "--mla", "--window-cache",
                 "--draft", "--draft-tokens", "--acceptance", "--draft-tp", *LAYOUT, *TIME, *OUT],
    "speculate": ["--context", "--batch", "--draft", "--acceptance", "--kmax", "--draft-tp", "--mla", *LAYOUT, *TIME,
                  *OUT],
    "train": ["--seq", "--batch", "--convention", "--tile", "--mla", "--zero", "--recompute", "--optimizer", "--schedule", "--virtual-stages", *LAYOUT,
              "--device", "--device-file", *TIMING, *OUT],
    "crossover": ["--mla", "--device", "--device-file", "--batch", "--context", "--weight-dtype", "--kv-dtype",
                  "--act-dtype", "--group-size", "--routing", *TIMING, *OUT],
    "memory": ["--batch", "--context", "--device", "--device-file", "--weight-dtype", "--kv-dtype", "--group-size",
               "--routing", "--state-dtype", "--index-dtype", "--reserve", "--mla", "--draft", "--draft-tp", "--window-cache",
               "--tp", "--ep", "--pp", "--dp", *TIMING, *OUT],
    "presets show": ["--format", "--output"],
    "presets import": ["--name", "--output", "--title", "--force", "--user"],
    "devices": OUT,
    "devices list": OUT,   # an alias of `devices` (the same listing)
    "devices show": ["--device-file", "--format", "--output"],
    "formula": ["--arch", "--convention", "--logits", "--latex", "--format", "--output"],
    "compare": ["--seq", "--prompt", "--context", "--new", "--batch", "--tools", "--hf-attention", "--hf-experts",
                *OUT],
    "mfu": ["--seq", "--prompt", "--context", "--new", "--batch", "--time", "--tokens-per-s", "--peak", "--device",
            "--device-file", "--act-dtype", "--tools", "--hf-attention", "--hf-experts", *OUT],
}
# What a line needs to run (and gets, mostly): by command, and by the workload of compare and mfu.
REQUIRED = {"prefill": ["--seq"], "train": ["--seq"], "chunked": ["--seq", "--chunk"], "decode": ["--context"], "generate": ["--prompt", "--new"],
            "speculate": ["--context", "--draft", "--acceptance"], "memory": ["--context", "--device"], "presets import": ["--name", "--output"]}
NEEDS = {"prefill": ["--seq"], "train": ["--seq"], "decode": ["--context"], "generate": ["--prompt", "--new"]}
MODEL = {"prefill", "chunked", "decode", "generate", "train", "crossover", "memory", "compare", "mfu", "speculate"}
FLAGS = ("--padded", "--latex", "--wide", "--force", "--sp")
MODEL_OPTIONS = {"--preset", "--config", "--preset-file"}
# The model: mostly a built-in preset; sometimes a file of one's own, none, or two (an error).
SOURCES = ([("--preset",)] * 4 + [("--config",), ("--preset-file",), (), ("--preset", "--config"),
                                  ("--config", "--preset-file")] + [("--preset",)] * 4)
TIMED = {"prefill", "chunked", "decode", "generate", "crossover", "speculate"}   # half of their lines get a device
EVERY_OPTION = sorted(set(itertools.chain(*COMMANDS.values())) | MODEL_OPTIONS)
SHORT = {"--preset": "-p", "--device": "-d", "--format": "-f", "--output": "-o", "--batch": "-b"}


def _foreign(command):
    """Options the command does not take: the others' options."""
    own = set(COMMANDS[command]) | (MODEL_OPTIONS if command in MODEL or command == "presets show" else set())
    return [option for option in EVERY_OPTION if option not in own]


def _value(draw, what, command=""):
    good, bad = VALUES.get(f"{command} {what}", VALUES.get(what, LENGTHS))
    return draw(st.sampled_from(good + bad if draw(st.integers(0, 3)) == 3 else good))


def _sometimes(draw, options):
    return [o for o in options if draw(st.integers(0, 9)) != 9]


@st.composite
def command_lines(draw):
    """(argv, the usage error it must end in or None)."""
    command = draw(st.sampled_from(sorted(COMMANDS)))
    argv = command.split()
    options = _sometimes(draw, REQUIRED.get(command, []))
    if command == "formula":
        argv.append(_value(draw, "formula"))
    elif command in ("compare", "mfu"):
        argv.append(_value(draw, "workload"))
        options += _sometimes(draw, NEEDS.get(argv[-1], []))
        if command == "mfu":
            options += _sometimes(draw, [draw(st.sampled_from(["--time", "--tokens-per-s"])),
                                         draw(st.sampled_from(["--device", "--device-file", "--peak"]))])
    elif command in ("presets show", "devices show"):
        argv.append(_value(draw, "--preset" if command == "presets show" else "--device"))
    elif command == "presets import" and draw(st.integers(0, 9)) != 9:
        argv.append(_value(draw, "--config"))
    if command in MODEL:
        for option in draw(st.sampled_from(SOURCES)):
            argv += [SHORT.get(option, option) if draw(st.booleans()) else option, _value(draw, option)]
    if command in TIMED and draw(st.booleans()):
        options.append(draw(st.sampled_from(["--device", "--device-file", "--device"])))
    options += draw(st.lists(st.sampled_from(COMMANDS[command]), max_size=5))
    foreign = draw(st.integers(0, 9)) == 9
    if foreign:
        options.insert(draw(st.integers(0, len(options))), draw(st.sampled_from(_foreign(command))))
    for option in options:
        spelled = SHORT[option] if option in SHORT and draw(st.booleans()) else option
        what = option
        if command == "formula" and argv[1] == "chunked" and option == "--convention":
            what = SLOW
        argv += [spelled] if option in FLAGS else [spelled, _value(draw, what, command)]
    if draw(st.integers(0, 49)) == 49:
        argv.append("--help")
    return argv, "No such option" if foreign else None


def _inputs(root):
    folder = root / "in"
    if not folder.exists():
        folder.mkdir()
        for name, data in INPUTS.items():
            (folder / name).write_bytes(data)
    return folder


def _real(arg, inputs, out):
    for mark, folder in (("@in", inputs), ("@hf", HF_CONFIGS), ("@out", out)):
        if arg == mark or arg.startswith(mark + "/"):
            return str(folder) + arg[len(mark):]
    return arg


def _files(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


_EXAMPLE = itertools.count()


def _main_in(folder, argv, shown, capsys) -> int:
    """``main(argv)`` run in ``folder`` (captured output reset first); anything escaping the one
    boundary is a traceback for the user, and fails the test."""
    capsys.readouterr()
    here = os.getcwd()
    os.chdir(folder)
    try:
        return main(argv)
    except BaseException as exc:
        pytest.fail(f"{shown} raised {type(exc).__name__}: {exc}")
    finally:
        os.chdir(here)


@seed(int(os.environ.get("CLI_SEED", 20250117)))
@settings(max_examples=int(os.environ.get("CLI_EXAMPLES", 120)), deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=command_lines())
def test_no_command_line_ends_in_a_traceback(case, tmp_path, capsys):
    drawn, usage = case
    inputs = _inputs(tmp_path)
    runs = tmp_path / "runs"
    out = runs / f"ex{next(_EXAMPLE)}"
    out.mkdir(parents=True)
    (out / "old.json").write_bytes(OLD)
    argv = [_real(arg, inputs, out) for arg in drawn]
    shown = f"costcalc {' '.join(argv)!r}"
    code = _main_in(out, argv, shown, capsys)
    stdout, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err, (shown, err)
    others = [line for line in lines if not line.startswith("warning: ")]
    written = _files(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "runs"], (shown, "wrote outside its folder")
    assert all(p.is_dir() and p.name.startswith("ex") for p in runs.iterdir()), (shown, "wrote beside its folder")
    assert not any(".tmp" in name for name in written), (shown, "left a temporary file", sorted(written))
    assert sorted(p.name for p in inputs.iterdir()) == sorted(INPUTS), (shown, "touched the inputs")
    if code == 0:
        assert usage is None, (shown, f"expected {usage!r}", err)
        assert all(line.startswith("wrote ") for line in others), (shown, err)
        new = {name: data for name, data in written.items() if not (name == "old.json" and data == OLD)}
        if "--help" in argv:
            assert stdout, shown
        elif new:   # a file, whole, and the only one
            assert len(new) == 1 and stdout == "" and len(others) <= 1, (shown, sorted(new), err)
            assert all(new.values()), (shown, "wrote an empty file")
        else:
            assert stdout, (shown, err)
    else:
        assert code == 2, (shown, code, err)
        assert len(others) == 1 and others[0].startswith("error: "), (shown, err)
        assert written == {"old.json": OLD}, (shown, "a failure left files", sorted(written))
        assert stdout == "", (shown, "a failure printed output", stdout[:200])
        if usage is not None:
            assert usage in others[0], (shown, err)


def test_the_tables_hold_each_commands_own_options():
    """COMMANDS lists what each command takes (so a foreign option is one): held to the app itself."""
    import typer

    from costcalc.cli.app import build

    def options(command):
        return {o for p in command.params for o in p.opts if o.startswith("--")} - {"--help"}

    root = typer.main.get_command(build())
    for name, listed in COMMANDS.items():
        command = root
        for word in name.split():
            command = command.commands[word]
        model = MODEL_OPTIONS if name in MODEL or name == "presets show" else set()
        assert options(command) == set(listed) | model, name


@seed(int(os.environ.get("CLI_SEED", 20250117)))
@settings(max_examples=int(os.environ.get("CLI_HOSTILE_EXAMPLES", 60)), deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(case=hostile.hostile_lines())
def test_hostile_files_and_targets_end_in_output_or_one_error(case, tmp_path, capsys):
    """A mutated config, preset or device file, and an odd -o target: exit 0 with the output,
    or exit 2 with one error line; no traceback, no control character on stdout, no stray file,
    and the input as it was."""
    kind, data, template, target_name = case
    out = tmp_path / f"h{next(_EXAMPLE)}"
    out.mkdir()
    source = tmp_path / f"{out.name}-{kind}.json"
    source.write_bytes(data)
    target = hostile.make_target(target_name, out, source)
    argv = [str(source) if a == "F" else a for a in template] + (["-o", str(target)] if target else [])
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and not p.is_symlink()}
    drain = hostile.Drain(target) if target_name == "@fifo" else None
    shown = f"costcalc {' '.join(argv)!r} ({data[:300]!r})"
    try:
        code = _main_in(out, argv, shown, capsys)
    finally:
        streamed = drain.close() if drain else b""
    stdout, err = capsys.readouterr()
    others = [line for line in err.splitlines() if line.strip() and not line.startswith("warning: ")]
    assert "Traceback" not in err, (shown, err)
    assert not hostile.CONTROL.search(stdout + streamed.decode("utf-8", "replace")), (shown, "a control character shown")
    assert source.read_bytes() == data, (shown, "changed its input")   # -o onto a link to it too (A1)
    names = sorted(p.name for p in out.iterdir())
    assert not any(".tmp" in name for name in names), (shown, "left a temporary file", names)
    if code == 0:
        assert all(line.startswith("wrote ") for line in others), (shown, err)
        assert stdout or streamed or (target is not None and target.exists()), (shown, "no output")
    else:
        assert code == 2, (shown, code, err)
        assert len(others) == 1 and others[0].startswith("error: ") and len(others[0]) < 2000, (shown, err[:2000])
        assert stdout == "" and not streamed, (shown, "a failure printed output")
        now = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and not p.is_symlink()}
        assert now == before, (shown, "a failure left files", sorted(now))
