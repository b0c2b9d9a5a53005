"""``costcalc plan``: the serving configurations of a model on N devices under latency targets
(``costcalc.plan``), the Pareto front of tokens/s per GPU against per user, and the best meeting
the targets, each with the ``costcalc generate`` line that reproduces it."""
from __future__ import annotations

import shlex
import textwrap
import sys
import time
from typing import Annotated, Any, Optional

import typer

from .. import plan, ranges, units
from ..errors import CostcalcError
from ..printable import escape
from ..render import render
from ..vocab import Dtype
from .emit import Out, emit_to
from .options import (AcceptanceOpt, BudgetOpt, ConfigOpt, DraftOpt, DeviceFileOpt, DeviceOpt, EngineOpt, EngineVersionOpt, FormatOpt, KvDtypeOpt,
                      OutputOpt, PresetFileOpt, PresetOpt, TimingOpt, WideOpt, model, traffic)

PROGRESS_AFTER_S = 1.0      # a search running longer than this shows a progress bar on stderr


def plan_command(
    preset: PresetOpt = None,
    preset_file: PresetFileOpt = None,
    config: ConfigOpt = None,
    device: DeviceOpt = None,
    device_file: DeviceFileOpt = None,
    devices: Annotated[str, typer.Option("--devices", metavar="N", help="Devices to fill (of --device).")] = ...,
    isl: Annotated[Optional[str], typer.Option("--isl", metavar="S", show_default=False,
                                               help="Input (prompt) tokens a request, e.g. 4k.")] = None,
    osl: Annotated[Optional[str], typer.Option("--osl", metavar="N", show_default=False,
                                               help="Output tokens a request (at least 2), e.g. 1k.")] = None,
    requests: Annotated[Optional[str], typer.Option(
        "--requests", metavar="FILE", show_default=False,
        help="Instead of --isl/--osl, a mix of request shapes: a JSON array of {\"isl\": 4096, \"osl\": 1024, "
             "\"share\": 0.5} (static batching; each class held to the targets, the mixture's tokens/s).")] = None,
    ttft: Annotated[str, typer.Option("--ttft", metavar="T", help="Time to first token target, e.g. 2s.")] = ...,
    tpot: Annotated[str, typer.Option("--tpot", metavar="T", help="Time per output token target, e.g. 30ms.")] = ...,
    weight_dtype: Annotated[Optional[str], typer.Option(
        "--weight-dtype", metavar="A,B", show_default=False,
        help="Weight formats to search, a comma list (as generate's --weight-dtype).  (default: the model's own, "
             "bf16 and fp8 where the device has an fp8 peak)")] = None,
    draft: DraftOpt = None,
    draft_tokens: Annotated[Optional[str], typer.Option(
        "--draft-tokens", metavar="K", show_default=False,
        help="With --acceptance: the tokens K a step drafts to search, a list or range.  (default: 1:4, or 1 to "
             "the positions --acceptance gives)")] = None,
    acceptance: AcceptanceOpt = None,
    batching: Annotated[str, typer.Option(
        "--batching", metavar="static|continuous",
        help="static: each candidate a batch prefilled at once, then decoded (generate); continuous: a tp x ep "
             "engine's steady state at a concurrency, prompt chunks sharing steps with decode (serve).")] = "static",
    budget: BudgetOpt = None,
    disagg: Annotated[bool, typer.Option(
        "--disagg", help="With --batching continuous: every split of the devices into a prefill pool and a decode "
                         "pool too (serve --disagg), beside the one-pool engines.")] = False,
    kv_dtype: KvDtypeOpt = None,
    timing: TimingOpt = None,
    engine: EngineOpt = None,
    engine_version: EngineVersionOpt = None,
    every: Annotated[bool, typer.Option("--all", help="Every candidate in the table, not the front only.")] = False,
    fmt: FormatOpt = None,
    output: OutputOpt = None,
    wide: WideOpt = False,
) -> None:
    """Search layouts x batch x weight format x speculation for the best serving configuration
    under --ttft and --tpot: the Pareto front of tokens/s per GPU against per user, and the best
    meeting the targets, each with the generate command that reproduces it (JSON and CSV: every
    candidate, with its pareto and meets_targets).

    Example: costcalc plan -p qwen3-235b-a22b --device h200 --devices 8 --isl 4k --osl 1k --ttft 2s --tpot 30ms
    """
    spec = model(preset, preset_file, config)
    if not (device or device_file):
        raise CostcalcError("plan needs a device: --device NAME (see 'costcalc devices') or --device-file PATH")
    request = plan.Request.of(_mix(isl, osl, requests), plan.duration(ttft, "--ttft"), plan.duration(tpot, "--tpot"))
    count = ranges.number(devices, "--devices")
    given = {"device": device, "device_file": device_file, "kv_dtype": kv_dtype, "timing": timing, "engine": engine,
             "engine_version": engine_version}
    chosen_traffic = traffic(given)
    precision, machine = chosen_traffic.precision, chosen_traffic.machine
    weights = plan.weight_choices(spec, precision, machine, _formats(weight_dtype))
    source = next((flag, value) for flag, value in (("--preset", preset), ("--preset-file", preset_file),
                                                    ("--config", config)) if value)
    mode = batching.strip().lower()
    if mode == "continuous" and (draft, draft_tokens, acceptance) != (None, None, None):
        raise CostcalcError(plan.NO_DRAFTS)      # before the drafts are read (the Setup checks it too)
    setup = plan.Setup(spec, precision, machine, count, weights, source, _flags(given),
                       _drafts(spec, draft, draft_tokens, acceptance), mode,
                       budget, disagg)
    bar = Progress()
    found = plan.search(setup, request, progress=bar)
    bar.close()
    best, met = plan.chosen(found.rows, request)
    rows = [{key: row[key] for key in plan.FIELDS} for row in found.rows]

    front = rows if every else [r for r, full in zip(rows, found.rows) if full["pareto"] or full is best]
    said = [_best_line(best, met, request)]

    def own(chosen_format: str, width: Optional[int]):
        if chosen_format == "table":
            return lambda handle: handle.write(escape(text(setup, request, found, (best, met), every), lines=True))
        if chosen_format == "markdown":
            return lambda handle: handle.write(render(front, "markdown", said, width))
        return None     # CSV and JSON: every candidate
    emit_to(rows, Out(fmt, output, wide), said, own)


DEFAULT_DRAFT_TOKENS = "1:4"


def _mix(isl: Optional[str], osl: Optional[str], requests: Optional[str]) -> tuple:
    """The request shapes asked: --isl and --osl (one, all of the requests), or a --requests file's."""
    if requests is not None:
        if isl is not None or osl is not None:
            raise CostcalcError("give --isl and --osl, or --requests FILE (a mix of request shapes), not both")
        from .. import jsonfile

        return plan.shapes(jsonfile.read(requests, "requests file"), f"requests file {requests!r}")
    if isl is None or osl is None:
        raise CostcalcError("give --isl and --osl (a request's prompt and output tokens), or --requests FILE")
    from fractions import Fraction

    return (plan.RequestShape(ranges.number(isl, "--isl"), ranges.number(osl, "--osl"), Fraction(1)),)


def _drafts(spec: Any, draft: Optional[str], tokens: Optional[str], acceptance: Optional[str]) -> Optional[tuple]:
    """The speculation axis asked for (None: ``plan.speculations``' default): with --acceptance, no draft
    and speculative decoding by ``--draft`` (else the model's MTP layers) at each K of --draft-tokens;
    without, no draft and ``--draft mtp``'s drafting. Each value checked here, in one line."""
    from ..evaluate import Options
    from .options import speculation

    if draft is None and acceptance is None:
        if tokens is not None:
            raise CostcalcError("--draft-tokens sizes speculative decoding: it needs --acceptance")
        return None
    drafter = (draft or "mtp").strip()
    if drafter.lower() == "mtp":
        drafter = "mtp"
        if spec.mtp is None:
            raise CostcalcError(f"{'--draft mtp' if draft else '--acceptance'}: {spec.name} has no multi-token-"
                                f"prediction layers costcalc models{'' if draft else '; give --draft PRESET (a draft model)'}")
    if acceptance is None:
        if tokens is not None:
            raise CostcalcError("--draft-tokens sizes speculative decoding: it needs --acceptance")
        speculation(drafter, None, None)            # a draft model without a rate: the one-line refusal
        return (None, plan.MTP)
    positions = len(acceptance.split(","))
    default = DEFAULT_DRAFT_TOKENS if positions == 1 else f"1:{positions}"
    ks = list(ranges.parse(tokens or default, "--draft-tokens", 1))
    rate = acceptance.replace(" ", "")

    def fields(k: int) -> dict:
        got = speculation(drafter, k, rate)
        Options(**got)                              # a K beyond the rates given: one line, before any search
        return got
    return (None, *plan.speculative(drafter, ks, rate, fields))


def _formats(text: Optional[str]) -> Optional[list]:
    if text is None:
        return None
    from ..weights import parse

    names = [n.strip().lower() for n in text.split(",")]
    if not all(names):
        raise CostcalcError(f"--weight-dtype: empty name in {text!r}")
    return [parse(n, "--weight-dtype") for n in dict.fromkeys(names)]


def _flags(given: dict[str, Any]) -> tuple:
    """The options every reproducing command repeats: the device, a KV dtype, the timing mode."""
    out = []
    for key, flag in (("device", "--device"), ("device_file", "--device-file"), ("kv_dtype", "--kv-dtype"),
                      ("timing", "--timing"), ("engine", "--engine"), ("engine_version", "--engine-version")):
        value = given[key]
        if value is not None:
            value = value.value if isinstance(value, Dtype) else str(value).strip()
            out += [flag, shlex.quote(value.lower() if key in ("device", "timing", "engine") else value)]
    return tuple(out)


class Progress:
    """A progress bar on stderr for a search running longer than ``PROGRESS_AFTER_S``."""

    def __init__(self) -> None:
        self.start, self.shown = time.perf_counter(), False

    def __call__(self, done: int, total: int) -> None:
        if not self.shown and (time.perf_counter() - self.start < PROGRESS_AFTER_S or not sys.stderr.isatty()):
            return          # a log or a pipe gets no bar
        self.shown = True
        filled = 30 * done // total
        sys.stderr.write(f"\rplan: [{'#' * filled}{'.' * (30 - filled)}] {done}/{total} layout x format x draft")
        sys.stderr.flush()

    def close(self) -> None:
        if self.shown:
            sys.stderr.write("\n")
            sys.stderr.flush()


CONCURRENCY = "conc"    # the batch column's head under --batching continuous: the requests in flight
HEAD = ("#", "layout", "dev", "batch", "weights", "draft", "ttft", "tpot", "per GPU", "per user", "ok")
RIGHT = {"#", "dev", "batch", "ttft", "tpot", "per GPU", "per user"}


def _cells(index: int, row: dict[str, Any], best: dict[str, Any]) -> list[str]:
    mark = "*" if row is best else ""
    return [f"{index}{mark}", row["layout"], str(row["devices"]), str(row["batch"]), row["weight_dtype"],
            row["speculation"] or "-", units.seconds(row["ttft_s"]), units.seconds(row["tpot_s"]),
            f"{row['tokens_per_s_per_gpu']:.1f}", f"{row['tokens_per_s_per_user']:.1f}",
            "yes" if row["meets_targets"] else "no"]


def text(setup: plan.Setup, request: plan.Request, found: plan.Search, choice: tuple, every: bool) -> str:
    """The terminal answer: what was searched (a --requests mix: its shapes), the front (``every``: all
    candidates) as a table with the chosen row marked ``*`` (tokens/s per GPU and per user; the draft column
    where a row drafts), each row's reproducing command, and the chosen configuration's line."""
    best, met = choice
    mix = request.mix or None
    rows = found.rows if every else [r for r in found.rows if r["pareto"] or r is best]
    keep = [c for c, name in enumerate(HEAD) if name != "draft" or any(r["speculation"] for r in rows)]
    head = [CONCURRENCY if name == "batch" and setup.continuous else name for name in HEAD]
    grid = [[line[c] for c in keep] for line in [head] + [_cells(i, r, best) for i, r in enumerate(rows, 1)]]
    names = [HEAD[c] for c in keep]
    widths = [max(len(line[c]) for line in grid) for c in range(len(names))]
    lines = ["  ".join(cell.rjust(w) if name in RIGHT else cell.ljust(w) for cell, w, name in
                       zip(line, widths, names)).rstrip() for line in grid]
    lines.insert(1, "  ".join("-" * w for w in widths))
    spec, device = setup.spec.name, setup.machine.device.name
    what = "every candidate" if every else "the Pareto front of tokens/s per GPU against per user"
    timing = setup.machine.timing_mode
    axes = ("engine or split" if setup.disagg else "engine") + " x weight format" if setup.continuous \
        else "layout x weight format x draft"
    shape = (f"prompts of {request.isl} tokens, {request.osl} out" if mix is None else
             f"a mix of {len(mix)} request shapes (" + ", ".join(f"{float(m.share):.0%} {m.isl}/{m.osl}" for m in mix)
             + " prompt/output tokens; ttft and tpot the worst shape's)")
    said = (f"{spec} on {setup.devices} {device}: {shape}; targets ttft "
            f"<= {units.seconds(request.ttft)}, tpot <= {units.seconds(request.tpot)}; {timing} timing, "
            f"{setup.batching} batching. {len(found.rows)} candidates ({found.evaluated} {axes}, "
            f"{len(found.skipped)} not valid or not fitting); {what}:")
    out = [*textwrap.wrap(said, 80), "", *lines, "",
           "commands (each reproduces its row)" + (":" if mix is None else
                                                   " -- each shape's generate line, ';' between: the row combines them:")]
    out += [f"{i:>{len(str(len(rows)))}}  {r['command']}" for i, r in enumerate(rows, 1)]
    out += ["", *textwrap.wrap(_best_line(best, met, request), 80), f"  {best['command']}", ""]
    notes = (CONTINUOUS_NOTES + (DISAGG_NOTES if setup.disagg else ())) if setup.continuous else \
        MIX_NOTES if mix is not None else NOTES
    out += [line for note in notes for line in textwrap.wrap(note, 80)]
    return "\n".join(out) + "\n"


def _best_line(best: dict[str, Any], met: bool, request: plan.Request) -> str:
    size = "concurrency" if best["batching"] == "continuous" else "batch"
    said = (f"{best['layout']} ({best['devices']} devices) {size} {best['batch']} {best['weight_dtype']}"
            + (f" draft {best['speculation']}" if best["speculation"] else "")
            + f": {best['tokens_per_s_per_gpu']:.1f} tokens/s per GPU, {best['tokens_per_s_per_user']:.1f} per user"
            + f" (ttft {units.seconds(best['ttft_s'])}, tpot {units.seconds(best['tpot_s'])})")
    if met:
        return f"best meeting the targets (*): {said}"
    return (f"no configuration meets ttft <= {units.seconds(request.ttft)} and tpot <= {units.seconds(request.tpot)}; "
            f"the closest (*, {plan.miss(best, request):.2f}x over): {said}")


NOTES = ("per GPU = batch x output tokens / (ttft + (N-1) tpot) / the layout's devices; per user = 1 / tpot (tokens/s). "
         "A layout of fewer devices than asked runs copies of itself on the rest (the same rates). ttft: the "
         "batch's prefill step; tpot: its decode phase / (N-1); as generate times them (docs/cost-model.md, "
         "Planning).",)
MIX_NOTES = ("A row of a mix: ttft and tpot the worst shape's (each held to the targets); per GPU = sum over the "
             "shapes of share x batch x output tokens / sum of share x (ttft + (N-1) tpot) of that shape's batch / "
             "the layout's devices (each shape's batches in proportion to its share of the requests); per user = 1 / "
             "tpot; each shape's row is its generate line (docs/cost-model.md, Planning).",)
CONTINUOUS_NOTES = (
    "conc = requests in flight (the JSON's batch). Continuous batching, as serve models it: each iteration one "
    "decode token a request and prompt chunks within --max-batched-tokens; ttft: a request's own mixed "
    "iterations; tpot: the rest of its cycle / (N-1); per GPU = requests/s x output tokens / the engine's "
    "devices; per user = 1 / tpot. An engine is tp x ep, or tp x dp replicas with the experts over them "
    "(serve runs no pipeline); one of fewer devices than asked runs copies of itself on the rest "
    "(docs/cost-model.md, Planning).",)
DISAGG_NOTES = (
    "p:AxL d:BxM: a prefill pool of A engines of layout L and a decode pool of B of M (serve --disagg), conc "
    "the requests on each decode engine; ttft: the prompt's iterations + its KV cache's transfer; tpot: the "
    "decode engine's iteration; per GPU: the slower pool's requests/s x output tokens / all the devices.",)
