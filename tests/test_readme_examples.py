"""Every command the README shows, run: what it prints must be what the README says.

A ``text`` block holds one or more ``$ costcalc ...`` lines, each followed by its output.
A command may be piped through ``cut -d, -f...``, ``head -n N``, ``tail -n N`` or
``grep TEXT`` (done here in Python). The expected lines are compared exactly, except:
a line ``...`` means the output goes on beyond what is shown; ``(lines cut)`` after the
command means the shown lines appear in the output in this order, others between them.
"""
import re
import shlex
from pathlib import Path

import pytest

from costcalc.cli import main

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def examples() -> list[tuple[str, list[str]]]:
    out = []
    for block in re.findall(r"```text\n(.*?)```", README, re.S):
        command, lines = None, []
        for line in block.splitlines():
            if line.startswith("$ costcalc "):
                if command:
                    out.append((command, lines))
                command, lines = line[2:], []
            elif command is not None:
                lines.append(line)
        if command:
            out.append((command, lines))
    return out


def _cut(lines: list[str], spec: str) -> list[str]:
    fields: list[int] = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        fields += list(range(int(lo), int(hi or lo) + 1)) if "-" in part else [int(lo)]
    return [",".join(cells[i - 1] for i in fields if i <= len(cells))
            for cells in (line.split(",") for line in lines)]


def run_example(command: str, capsys) -> list[str]:
    command, lines_cut = re.subn(r"\s{2,}\(lines cut\)\s*$", "", command)
    stages = [shlex.split(stage) for stage in command.split("|")]
    code = main(stages[0][1:])
    out, err = capsys.readouterr()
    assert code == 0, err
    lines = out.rstrip("\n").split("\n")
    for stage in stages[1:]:
        tool, args = stage[0], stage[1:]
        if tool == "cut":
            assert args[0] == "-d," and args[1].startswith("-f"), stage
            lines = _cut(lines, args[1][2:])
        elif tool in ("head", "tail"):
            n = int(args[1] if args[0] == "-n" else args[0].lstrip("-"))
            lines = lines[:n] if tool == "head" else lines[-n:]
        elif tool == "grep":
            lines = [line for line in lines if args[0] in line]
        else:
            raise AssertionError(f"README pipes through {tool!r}, which this test does not run")
    return lines, bool(lines_cut)


@pytest.mark.parametrize("command, expected", examples(), ids=[c for c, _ in examples()])
def test_readme_example_prints_what_the_readme_shows(command, expected, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    if "--timing measured" in command:      # the measured extra's tables (docs/cost-model.md, Measured time)
        pytest.importorskip("pyarrow")
        pytest.importorskip("aiconfigurator_core")
    got, lines_cut = run_example(command, capsys)
    while expected and not expected[-1].strip():
        expected = expected[:-1]
    if lines_cut:
        position = 0
        for line in expected:
            assert line in got[position:], f"{line!r} not printed (in this order) by {command}"
            position = got.index(line, position) + 1
        return
    if expected and expected[-1] == "...":
        expected = expected[:-1]
        got = got[:len(expected)]
    assert [line.rstrip() for line in got] == [line.rstrip() for line in expected]


def test_the_readme_shows_examples_of_the_main_commands():
    shown = {command.split()[1] for command, _ in examples()}
    assert {"prefill", "decode", "chunked", "formula", "crossover", "presets"} <= shown


def update(path: Path = Path(__file__).resolve().parents[1] / "README.md") -> None:
    """Rewrite the README's example outputs from the commands (``python tests/test_readme_examples.py``).
    A block ending in ``...`` keeps as many lines as it shows; ``(lines cut)`` blocks are left as they are."""
    import contextlib
    import io

    class Capture:
        def readouterr(self):
            out, err = buffer.getvalue(), ""
            buffer.seek(0), buffer.truncate()
            return out, err

    buffer = io.StringIO()
    text = path.read_text()

    def redo(match: re.Match) -> str:
        block, out = match.group(1), []
        chunks = re.split(r"(?m)^(?=\$ costcalc )", block)
        for chunk in chunks:
            if not chunk.startswith("$ costcalc "):
                out.append(chunk)
                continue
            command, _, rest = chunk.partition("\n")
            shown = rest.rstrip("\n").split("\n") if rest.strip() else []
            if "(lines cut)" in command:
                out.append(chunk)
                continue
            with contextlib.redirect_stdout(buffer):
                got, _ = run_example(command[2:], Capture())
            if shown and shown[-1] == "...":
                got = got[:len(shown) - 1] + ["..."]
            out.append(command + "\n" + "\n".join(line.rstrip() for line in got) + "\n")
        return "```text\n" + "".join(out) + "```"

    path.write_text(re.sub(r"```text\n(.*?)```", redo, text, flags=re.S))


if __name__ == "__main__":
    import os

    os.environ["COLUMNS"] = "80"
    update()
