"""Reports a reader can open without the tool: Markdown and CSV."""
from __future__ import annotations

from pathlib import Path

from costcalc.render import render

from .harness import Outcome


def write(outcome: Outcome, directory: Path, title: str) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, rows in (("checks", outcome.checks), ("timings", outcome.timings), ("attention", outcome.attention)):
        if rows:
            path = directory / f"{name}.csv"
            path.write_text(render(rows, "csv"))
            paths.append(path)
    bad = [r for r in outcome.checks if not r["match"]]
    lines = [f"# {title}", "",
             f"{len(outcome.checks)} checks, {len(bad)} mismatches: "
             + ("every term and convention matches the formulas exactly." if not bad else "SEE BELOW."), "",
             "Counted = FLOPs executed by the torch decoder (FlopCounterMode, with the attention ops' "
             "conventions read from their masks); formula = costcalc's core for the same sizes.", ""]
    for name, rows in (("Checks", outcome.checks), ("Timings", outcome.timings),
                       ("Causal vs full attention time", outcome.attention)):
        if rows:
            lines += [f"## {name}", "", render(rows, "markdown"), ""]
    if outcome.extras:
        lines += ["## Notes", "", "```", *outcome.extras, "```", ""]
    path = directory / "report.md"
    path.write_text("\n".join(lines))
    return [path] + paths
