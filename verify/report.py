"""What a run gives a reader: the command's one document (table or JSON), and a report
folder that opens without the tool (Markdown and CSV). No torch here: the report folder is
checked before the run, the documents are rendered after it."""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from costcalc import outputs
from costcalc.errors import CostcalcError
from costcalc.render import render

if TYPE_CHECKING:
    from .harness import Outcome

# The row sections of an outcome: attribute, heading.
SECTIONS = (("checks", "Checks"), ("timings", "Timings"), ("attention", "Causal vs full attention time"))
FILES = ("report.md",) + tuple(f"{name}.csv" for name, _ in SECTIONS)


def targets(directory: str | Path) -> dict[str, outputs.Target]:
    """Check, before any work, that a report folder can hold its files: the folder must be a
    writable directory or creatable (not a file, not under one); a report file already there
    must be a regular file (it is replaced atomically, never written half)."""
    folder = outputs.folder(directory, "--report")
    found = {}
    for name in FILES:
        path = folder / name
        if folder.is_dir():
            dest = outputs.target(path, "--report")
            if dest.kind != "file":
                raise CostcalcError(f"--report: {str(path)!r} is not a regular file")
        else:
            dest = outputs.Target("file", path, str(path))
        found[name] = dest
    return found


def write(outcome: Outcome, dests: dict[str, outputs.Target], title: str) -> list[Path]:
    """The report files of ``outcome``, each written atomically; returns their paths."""
    folder = dests["report.md"].path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CostcalcError(f"--report: cannot create {str(folder)!r}: {exc.strerror or exc}") from None
    written = []
    for name, _ in SECTIONS:
        rows, dest = getattr(outcome, name), dests[f"{name}.csv"]
        if rows:
            outputs.write_text(dest, render(rows, "csv"))
            written.append(dest.path)
        elif dest.path.is_file():    # an earlier run's section this run did not make: not left to mislead
            dest.path.unlink()
    lines = [f"# {title}", "",
             f"{outcome.summary}: "
             + ("every term and convention matches the formulas exactly." if outcome.ok else "SEE BELOW."), "",
             "Counted = FLOPs executed by the torch decoder (FlopCounterMode, with the attention ops' "
             "conventions read from their masks); formula = costcalc's core for the same sizes.", "",
             "Files: " + ", ".join(p.name for p in written) + ".", ""]
    for name, heading in SECTIONS:
        rows = getattr(outcome, name)
        if rows:
            lines += [f"## {heading}", "", render(rows, "markdown"), ""]
    if outcome.extras:
        lines += ["## Notes", "", "```", *outcome.extras, "```", ""]
    outputs.write_text(dests["report.md"], "\n".join(lines))
    return [dests["report.md"].path] + written


def json_document(outcome: Outcome) -> str:
    """One JSON object: every section's rows, the notes (the run's header line first) and
    the count of checks and mismatches."""
    doc = {name: getattr(outcome, name) for name, _ in SECTIONS}
    doc["notes"] = [outcome.title, *outcome.extras] if outcome.title else list(outcome.extras)
    doc["summary"] = {"checks": len(outcome.checks), "mismatches": outcome.mismatches}
    return json.dumps(doc, indent=2) + "\n"


def table_document(outcome: Outcome, width: int | None) -> str:
    """The terminal text: the run's header line, each section's table, the notes, and
    ``N checks, M mismatches`` last."""
    present = [(name, getattr(outcome, name)) for name, _ in SECTIONS if getattr(outcome, name)]
    parts = [outcome.title, ""] if outcome.title else []
    for i, (name, rows) in enumerate(present):
        last = i == len(present) - 1
        # The checks: a table per job (its workload and sizes in its header), so that the
        # formula and counted columns fit the width beside the term, operator and convention.
        groups = _by_job(rows) if name == "checks" and width is not None else [rows]
        for j, group in enumerate(groups):
            text = render(group, "table", outcome.extras if last and j == len(groups) - 1 else (), width)
            parts.append(text if j == len(groups) - 1 else _table_only(text))
    return "\n".join(parts) + outcome.summary + "\n"


def _by_job(rows: list[dict]) -> list[list[dict]]:
    jobs: dict[tuple, list[dict]] = {}
    for row in rows:
        jobs.setdefault((row.get("workload"), row.get("detail")), []).append(row)
    return list(jobs.values())


def _table_only(text: str) -> str:
    """A table without the notes beneath it (the notes follow the last table once)."""
    lines = text.splitlines()
    body = lines[:lines.index("", lines.index("") + 1)] if lines.count("") > 1 else lines
    return "\n".join(body) + "\n"
