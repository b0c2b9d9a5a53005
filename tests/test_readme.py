"""The README's promises: the Quickstart commands, CI running the same test command,
and the Python API example running as written."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def quickstart_commands():
    section = README.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [line for line in block.splitlines() if line and not line.startswith("#")]


def test_quickstart_has_two_commands_and_ci_runs_the_test_one():
    commands = quickstart_commands()
    assert len(commands) == 2
    assert "costcalc prefill --preset" in commands[0]
    assert "pytest" in commands[1]
    ci = (ROOT / ".ci" / "run").read_text()
    assert commands[1] in ci.splitlines()


def test_python_api_example_runs():
    code = re.search(r"## Python API\n\n```python\n(.*?)```", README, re.S).group(1)
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    assert scope["df"].shape[0] == 3
    assert scope["bd"].evaluate({**scope["spec"].values(), scope["s"].B: 1, scope["s"].S: 4096})["total"] > 0


def test_sweep_example_runs_and_prints_the_exact_value_it_states():
    blocks = re.findall(r"```python\n(.*?)```", README.split("## Python API", 1)[1].split("\n## ", 1)[0], re.S)
    code = next(b for b in blocks if "calc.table" in b)
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    stated = int(re.search(r'cols\["total_flops"\]\[-1\]\s+# (\d+)', code).group(1))
    assert scope["cols"]["total_flops"][-1] == stated
    from costcalc import calc, presets

    assert stated == calc.prefill(presets.load("llama-3.1-405b"), 1_000_000, 64)["total_flops"]
