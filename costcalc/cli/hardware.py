"""Commands about devices: the profiles, and whether a model and its cache fit."""
from __future__ import annotations

import functools
from typing import Annotated, Optional

import typer

from .. import devices as device_data, notes, units
from ..errors import CostcalcError
from ..vocab import WindowCache
from .options import (ConfigOpt, DeviceFileOpt, DraftOpt, DraftTpOpt, FormatOpt, Mla, MlaOpt, OutputOpt, PresetFileOpt, PresetOpt, Traffic,
                      WideOpt, axes, for_models, mla_form, models, warn, with_layout, with_some_traffic)
from .options import speculation as speculation_fields
from .emit import emit, emit_listing, output_format, write_fields, write_text
from .. import outputs

devices_app = typer.Typer(help="Device profiles: peaks per dtype, memory bandwidth and size, with sources; "
                               "list them (no command, or list) or show one.\n\nExample: costcalc devices show h100",
                          invoke_without_command=True, no_args_is_help=False)


@devices_app.callback()
def devices_list(ctx: typer.Context, fmt: FormatOpt = None, output: OutputOpt = None, wide: WideOpt = False) -> None:
    """List the built-in device profiles (dense peaks, not "with sparsity").

    Example: costcalc devices
    """
    if ctx.invoked_subcommand is not None:
        return
    emit_listing(device_data.load_all(), (_line, _flat), fmt, output, wide)


@devices_app.command("list")
def devices_list_command(fmt: FormatOpt = None, output: OutputOpt = None, wide: WideOpt = False) -> None:
    """The same listing as 'costcalc devices' (an alias).

    Example: costcalc devices list -f json
    """
    emit_listing(device_data.load_all(), (_line, _flat), fmt, output, wide)


def _line(d) -> dict:
    peak = {k: units.flops(d.peak_flops[k], "FLOP/s") if k in d.peak_flops else "" for k in ("bf16", "fp8")}
    return {"device": d.name, "title": d.title, **peak, "memory": units.nbytes(d.mem_bytes),
            "bandwidth": units.nbytes(d.mem_bw) + "/s"}


@devices_app.command("show")
def devices_show(
    name: Annotated[Optional[str], typer.Argument(help="Device name (see 'costcalc devices').")] = None,
    device_file: DeviceFileOpt = None,
    fmt: FormatOpt = None,
    output: OutputOpt = None,
) -> None:
    """Every field of one device profile, with its datasheet source.

    Example: costcalc devices show h100 -f json
    """
    if bool(name) == bool(device_file):
        raise CostcalcError("give a device name (costcalc devices show NAME) or --device-file PATH")
    profile = device_data.load(name) if name else device_data.load_file(device_file)
    chosen = output_format(fmt, outputs.target(output))
    if chosen == "json":
        import json

        write_text(output, json.dumps(profile.to_dict(), indent=2) + "\n")
        return
    row = _flat(profile)
    if chosen == "table":       # readable units; CSV and JSON keep the numbers as the profile has them
        write_fields(output, row, _readable)
        return
    emit([row], fmt, output)


def _readable(key: str, value) -> str:
    if key.startswith("peak_flops."):
        return f"{units.flops(value, 'FLOP/s')} ({value:g})"
    if key in ("mem_bw", "mem_bytes"):
        return f"{units.nbytes(value)}{'/s' if key == 'mem_bw' else ''} ({value:g})"
    if key.endswith(".bytes_per_s_each_way"):
        return f"{units.nbytes(value)}/s each way ({value:g})"
    if key.endswith(".latency_s"):
        return f"{value * 1e6:g} us ({value:g})"
    return str(value)


def _links(d) -> dict:
    """The per-direction link figures (``interconnect.scale_up``/``scale_out``) a collective uses."""
    out = {}
    for kind, link in (("scale_up", d.scale_up), ("scale_out", d.scale_out)):
        if link is not None:
            out |= {f"{kind}.link": link.name, f"{kind}.bytes_per_s_each_way": link.bytes_per_s_each_way,
                    **({f"{kind}.domain_gpus": link.domain, f"{kind}.topology": link.topology,
                        f"{kind}.all_reduce": link.all_reduce} if kind == "scale_up" else {}),
                    f"{kind}.latency_s": link.latency_s}
    return out


def _flat(d) -> dict:
    return {"name": d.name, "title": d.title, **{f"peak_flops.{k}": v for k, v in d.peak_flops.items()},
            "mem_bw": d.mem_bw, "mem_bytes": d.mem_bytes, **_links(d),
            **{f"source.{k}": v for k, v in d.source.items() if isinstance(v, str)}}


@with_some_traffic("device", "device_file", "weight_dtype", "kv_dtype", "group_size", "routing", "state_dtype",
                   "index_dtype")
@functools.partial(with_layout, keep=("tp", "ep", "pp", "dp"))
def memory(
    preset: PresetOpt = None,
    preset_file: PresetFileOpt = None,
    config: ConfigOpt = None,
    batch: Annotated[str, typer.Option("--batch", "-b", metavar="B",
                                       help="Sequences held at once; a list or range sweeps (8,32 or 1:64:x2).")] = "1",
    context: Annotated[str, typer.Option("--context", "-t", metavar="T",
                                         help="Tokens each sequence holds in its KV cache (e.g. 128k); a list or "
                                              "range sweeps.")] = ...,
    traffic: Traffic = Traffic(),
    layout: dict = None,
    reserve: Annotated[float, typer.Option(help="Fraction of the device's memory kept free "
                                                "(activations, workspace).")] = 0.1,
    mla: MlaOpt = Mla.auto,
    draft: DraftOpt = None,
    draft_tp: DraftTpOpt = None,
    window_cache: Annotated[Optional[WindowCache], typer.Option(
        "--window-cache", show_default=False,
        help="rolling: a sliding-window layer keeps its last W tokens and a chunked one its chunk, as serving "
             "caches do (vLLM, Hugging Face); whole: every layer keeps every token.  (default: rolling)")] = None,
    fmt: FormatOpt = None,
    output: OutputOpt = None,
    wide: WideOpt = False,
) -> None:
    """Does it fit: resident weights, the KV cache of B x T, the largest batch and context, and the
    smallest layout that fits (fits_on); with --tp/--ep/--pp/--dp, per device of that layout.

    Example: costcalc memory --preset llama-3.1-70b --batch 8 --context 32k --device h100 --tp 2
    """
    from ..evaluate import Options, Query
    from ..layout import Layout
    from ..memory import answer, check

    specs = models(preset, preset_file, config)
    precision, machine = for_models(traffic, specs)
    if machine is None:
        raise CostcalcError("memory needs a device: --device NAME (see 'costcalc devices') or --device-file PATH")
    points = axes("decode", len(specs), batch=(batch, "--batch"), context=(context, "--context"))
    if window_cache is not None and not any(g.block.attention in ("window", "chunk") for spec in specs
                                            for g in spec.groups):
        warn(f"--window-cache {window_cache.value} does nothing: {', '.join(s.name for s in specs)} has no "
             f"window or chunked layers")
    options = Options(mla=mla_form(mla, specs), window_cache=window_cache or WindowCache.rolling,
                      **speculation_fields(draft, held=True, draft_tp=draft_tp))
    placed = Layout(**layout)
    for spec in specs:          # the layout against each model before any row
        check(spec, placed, options)
    answers = [answer(Query(spec, "decode", options, precision, machine), int(b), int(t), reserve, placed)
               for spec in specs for b, t in zip(points["batch"], points["context"])]
    rows = [row for row, _ in answers]
    if output_format(fmt, outputs.target(output)) in ("table", "markdown"):   # each stage's device, readable
        rows = [{**row, "stages": "; ".join(f"{st['layers']} layers {units.nbytes(st['total_bytes'])}"
                                             for st in row["stages"])} if "stages" in row else row for row in rows]
    lines = list(dict.fromkeys(line for _, line in answers))
    emit(rows, fmt, output, [notes.MEMORY] + ([notes.MEMORY_LAYOUT] if not placed.single else [])
         + ([notes.STATE] if any(s.has_mixers for s in specs) else [])
         + ([notes.DRAFT] if any("draft" in row for row in rows) else [])
         + (lines if len(lines) <= notes.FITS_ON_LINES else []), wide)
