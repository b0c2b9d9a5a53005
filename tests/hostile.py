"""Hypothesis strategies for hostile inputs (the reliability audit's categories): real configs,
presets and device files mutated (a key deleted, duplicated or retyped; huge, subnormal and
5,000-digit numbers; text with control characters), and odd ``-o`` targets (a directory, a FIFO,
a link to an input file, a name near the 255-byte limit). Used by ``test_cli_property``."""
import json
import os
import re
import select
import threading
import time
from pathlib import Path

from hypothesis import strategies as st

ROOT = Path(__file__).parent.parent
HF_CONFIGS = Path(__file__).parent / "data" / "hf-configs"
CONFIGS = ["llama-3.1-8b", "mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3", "gpt-oss-20b"]
PRESETS = ["toy", "llama-3.1-8b", "gpt-oss-20b", "deepseek-v3"]
DEVICES = ["h100", "mi300x"]

HUGE = [10**7, 2**16, 2**16 + 1, 2**40, 2**40 + 1, 2**62, 10**30, 10**200]
ODD = [0, -1, 1.5, 5e-324, 1e-320, 1e-300, 1e300, True, None, "4096", [4096], {"x": 1}]
TEXT = ["\x1b]0;owned\x07\x1b[2J", "evil\n", "a\rb", "\x9b31m", "\x7f", "x" * 10_000, "", "caf\xe9"]
DIGITS_5000 = "1" + "0" * 4999      # past Python's 4,300-digit limit: written into the text
CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")   # what a terminal may obey (a newline aside)


def _paths(value, prefix=()):
    """Every (path, value) of a JSON value: keys of objects, indices of lists."""
    yield prefix, value
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, prefix + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value[:8]):
            yield from _paths(item, prefix + (index,))


def _set(data, path, value):
    for step in path[:-1]:
        data = data[step]
    data[path[-1]] = value


@st.composite
def mutated(draw, data: dict) -> bytes:
    """One to three mutations of a JSON object, as the bytes of a file."""
    data = json.loads(json.dumps(data))
    raw_tail = ""
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p, _ in _paths(data) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        kind = draw(st.sampled_from(["delete", "huge", "odd", "text", "key", "digits", "duplicate", "layers"]))
        if kind == "delete":
            parent = data
            for step in path[:-1]:
                parent = parent[step]
            del parent[path[-1]]
        elif kind == "huge":
            _set(data, path, draw(st.sampled_from(HUGE)))
        elif kind == "odd":
            _set(data, path, draw(st.sampled_from(ODD)))
        elif kind == "text":
            _set(data, path, draw(st.sampled_from(TEXT)))
        elif kind == "key":              # a new key: text with control characters, or long
            data[draw(st.sampled_from(TEXT[:5] + ["x" * 5000]))] = 1
        elif kind == "digits":
            _set(data, path, "@DIGITS@")
        elif kind == "duplicate" and isinstance(path[0], str):
            raw_tail = f', "{path[0]}": 1'
        elif kind == "layers":           # the layer count or the groups, far past their maxima
            if "num_hidden_layers" in data:
                data["num_hidden_layers"] = draw(st.sampled_from([10**7, 2**16, 2**16 + 1]))
            elif "layers" in data or "L" in data:
                data.pop("L", None)
                arch = data.pop("arch", "dense")
                count = draw(st.sampled_from([2, 1024, 1025]))
                data["layers"] = [{"count": 1, "arch": arch}] * count
    text = json.dumps(data).replace('"@DIGITS@"', DIGITS_5000)
    if raw_tail and text.endswith("}"):
        text = text[:-1] + raw_tail + "}"
    return text.encode()


def config_files():
    return st.sampled_from(CONFIGS).flatmap(
        lambda name: mutated(json.loads((HF_CONFIGS / f"{name}.json").read_text())))


def preset_files():
    return st.sampled_from(PRESETS).flatmap(
        lambda name: mutated(json.loads((ROOT / "presets" / f"{name}.json").read_text())))


def device_files():
    return st.sampled_from(DEVICES).flatmap(
        lambda name: mutated(json.loads((ROOT / "presets" / "devices" / f"{name}.json").read_text())))


# Command lines that read one file (F), with a format or none; -o comes from TARGETS.
COMMANDS = {
    "config": [["prefill", "--config", "F", "--seq", "1024"], ["prefill", "--config", "F", "--seq", "1k", "-d", "h100"],
               ["presets", "show", "--config", "F"], ["decode", "--config", "F", "--context", "4k", "-d", "h100"],
               ["memory", "--config", "F", "--context", "4k", "--device", "h100"]],
    "preset": [["prefill", "--preset-file", "F", "--seq", "1k"], ["prefill", "--preset-file", "F", "--seq", "1k", "-d",
                                                                  "h100"],
               ["presets", "show", "--preset-file", "F"], ["crossover", "--preset-file", "F", "-d", "h100"]],
    "device": [["devices", "show", "--device-file", "F"], ["prefill", "-p", "toy", "--seq", "4", "--device-file", "F"],
               ["memory", "-p", "toy", "--context", "4", "--device-file", "F"],
               ["mfu", "prefill", "-p", "toy", "--seq", "4", "--time", "1", "--device-file", "F"]],
}
FILES = {"config": config_files, "preset": preset_files, "device": device_files}
FORMATS = [[], ["-f", "csv"], ["-f", "json"], ["-f", "markdown"], ["-f", "table"]]
# -o: none, plain files, and odd targets made in the example's own folder (see ``make_target``).
TARGETS = [None, None, "r.csv", "r.json", "@dir", "@fifo", "@link-to-input", "@long"]


@st.composite
def hostile_lines(draw):
    """(kind of file, its bytes, argv with F for its path, the -o target or None)."""
    kind = draw(st.sampled_from(sorted(COMMANDS)))
    argv = list(draw(st.sampled_from(COMMANDS[kind]))) + draw(st.sampled_from(FORMATS))
    return kind, draw(FILES[kind]()), argv, draw(st.sampled_from(TARGETS))


def make_target(name, out: Path, input_path: Path):
    """The path ``-o`` names, made real in ``out``: a directory, a FIFO (with a reader that
    drains it: see ``Drain``), a link to the input file, a name of 255 bytes."""
    if name is None:
        return None
    if name == "@dir":
        (out / "d").mkdir()
        return out / "d"
    if name == "@fifo":
        os.mkfifo(out / "fifo")
        return out / "fifo"
    if name == "@link-to-input":
        (out / "link.json").symlink_to(input_path)
        return out / "link.json"
    if name == "@long":
        return out / ("a" * 251 + ".csv")
    return out / name


class Drain:
    """Reads a FIFO while a command writes it (opened first, without blocking, so that the
    writer's open never waits), and keeps what came through."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        self.data = bytearray()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            ready, _, _ = select.select([self.fd], [], [], 0.02)
            if ready:
                chunk = os.read(self.fd, 1 << 16)
                if chunk:
                    self.data += chunk
                    continue
            if self.stop.is_set():
                return
            time.sleep(0.01)       # no writer yet (or it closed): the FIFO reads as at its end

    def close(self) -> bytes:
        self.stop.set()
        self.thread.join(5)
        os.close(self.fd)
        return bytes(self.data)
