"""Commands that describe rather than evaluate: formula, crossover, presets."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from .. import calc, notes, outputs, presets, ranges, units, vocab
from ..errors import CostcalcError
from ..core.registry import WORKLOADS
from ..blocks import ATTENTIONS, FFNS, FORMS, parse
from ..vocab import ARCHS, SCAN
from ..terminal import wrap, wrap_header
from .options import (ConfigOpt, Convention, ConventionOpt, FormatOpt, Logits, LogitsOpt, Mla, MlaOpt, OutputOpt,
                      PresetFileOpt, PresetOpt, Traffic, WideOpt, conventions, for_models, mla_form, model, models,
                      warn, with_some_traffic)
from .emit import TABLE_WIDTH, emit, emit_listing, output_format, write_fields, write_text

FORMULA_WORKLOADS = [name for name in WORKLOADS if name != "decode_phase"] + ["crossover"]


def formula(
    workload: Annotated[str, typer.Argument(help=f"One of: {', '.join(FORMULA_WORKLOADS)}.")],
    arch: Annotated[str, typer.Option(help=f"Block kind: {' or '.join(ARCHS)}, or ATTENTION.FFN with attention "
                                           f"{', '.join(ATTENTIONS)} (mla_q: with a low-rank query; mla or mla_q + "
                                           f"{' or '.join('-' + f for f in FORMS[1:])}; window + -rolling) and FFN "
                                           f"{', '.join(FFNS)} (moe + _plain, _shared, _shared_gate), e.g. window.moe, "
                                           "mla_q-absorbed.moe_shared.")] = "dense",
    convention: ConventionOpt = Convention.causal,
    logits: LogitsOpt = Logits.last,
    latex: Annotated[bool, typer.Option("--latex", help="Print LaTeX instead of plain text.")] = False,
    fmt: FormatOpt = None,
    output: OutputOpt = None,
) -> None:
    """The symbolic formula of a workload, term by term, as derived by the core.

    Example: costcalc formula decode --arch moe
    """
    from ..errors import CostcalcError
    from ..formulas import describe, formula_rows

    from ..blocks import parse, parse_arch

    try:
        parse_arch(arch)
    except ValueError as exc:
        raise CostcalcError(f"--arch {exc}") from None
    try:
        rows = [r for c in conventions(convention) for r in formula_rows(workload, arch, c, logits.value)]
    except (ValueError, ArithmeticError, NotImplementedError) as exc:
        if parse(arch).attention in ("window", "chunk") or parse(arch).sparse:
            local = ("a sliding window" if parse(arch).attention == "window" else
                     "an attention chunk" if parse(arch).attention == "chunk" else "a sparse layer's top-k")
            raise CostcalcError(f"formula {workload} --arch {arch}: {local} makes it piecewise; "
                                f"'costcalc crossover' solves it per model (it may be 'never')") from None
        raise CostcalcError(f"formula {workload} --arch {arch}: {' '.join(str(exc).split())}") from None
    chosen = output_format(fmt, outputs.target(output))
    if chosen != "table":
        if latex:
            warn(f"--latex does nothing with {chosen}: every row has both its formula and latex")
        emit(rows, fmt, output)
        return
    key = "latex" if latex else "formula"
    lines = []
    for conv in conventions(convention):
        group = [r for r in rows if r["convention"] == conv]
        scan = f" | scan {SCAN[conv]}" if parse(arch).mixer else ""
        lines += wrap_header(f"{workload} ({describe(workload)}) | arch {arch} | convention {conv}{scan}"
                             + (f" | logits {group[0]['logits']}" if "logits" in group[-1] else ""), TABLE_WIDTH)
        width = max(len(r["term"]) for r in group)
        lines += [f"  {r['term']:<{width}} = {r[key]}" for r in group] + [""]
    footer = notes.footer(set(conventions(convention)), {r['logits'] for r in rows if 'logits' in r},
                          {r["term"] for r in rows})
    lines += [line for note in footer for line in wrap(note, TABLE_WIDTH)]
    text = "\n".join(lines) + "\n"
    write_text(output, text)


@with_some_traffic("device", "device_file", "weight_dtype", "kv_dtype", "group_size", "routing")
def crossover(
    preset: PresetOpt = None,
    preset_file: PresetFileOpt = None,
    config: ConfigOpt = None,
    mla: MlaOpt = Mla.auto,
    traffic: Traffic = Traffic(),
    batch: Annotated[str, typer.Option("--batch", "-b", metavar="B", help="Batch of the time crossover.")] = "1",
    fmt: FormatOpt = None,
    output: OutputOpt = None,
    wide: WideOpt = False,
) -> None:
    """T_equal for decode, and the prefill length where attention equals the linear layers;
    with a device (or dtypes), the time crossover beside it: the decode context where reading
    the K/V cache takes as long as reading the weights.

    Example: costcalc crossover --preset llama-3.1-8b --device h100 --batch 64
    """
    batch = ranges.number(batch, "--batch")    # the one check of every length and batch (at most 2^40)
    if batch < 1:
        raise CostcalcError(f"--batch: {batch} is not positive")
    specs = models(preset, preset_file, config)
    mla = mla_form(mla, specs)
    precision, _ = for_models(traffic, specs)
    if precision is None and batch != 1:
        warn("--batch does nothing without --device or a dtype: FLOPs crossovers are per sequence")
    rows = [row for spec in specs for row in calc.crossover(spec, mla=mla, precision=precision, batch=batch)]
    sparse = any(g.block.sparse for spec in specs for g in spec.groups)
    emit(rows, fmt, output, [notes.CROSSOVER] + ([notes.TIME_CROSSOVER] if precision else [])
         + ([notes.SPARSE_CROSSOVER] if sparse else []), wide)


presets_app = typer.Typer(help="Built-in model presets: list them (no command), show one, import a Hugging "
                               "Face config.\n\nExample: costcalc presets show llama-3.1-8b",
                          invoke_without_command=True,
                          no_args_is_help=False)


@presets_app.callback()
def presets_list(ctx: typer.Context, fmt: FormatOpt = None, output: OutputOpt = None, wide: WideOpt = False) -> None:
    """List the built-in presets with their key sizes.

    Example: costcalc presets
    """
    if ctx.invoked_subcommand is not None:
        return
    emit_listing(presets.load_all(), (_compact, _summary), fmt, output, wide)


def _compact(spec) -> dict:
    params = calc.parameters(spec)
    return {"preset": spec.name, "title": spec.title,
            "layers": "\n".join(f"{g.count} x {g.arch}" + _local(g) for g in spec.groups),
            "d": spec["d"], "V": spec["V"], "total_params": units.params(params["total_params"]),
            "active_params": units.params(params["active_params"])}


def _local(group) -> str:
    """A window's or chunk's size, inline (W) or on a line of its own (W_c, which is longer)."""
    if "W" in group.sizes:
        return f" (W={group.sizes['W']})"
    return f"\n  (W_c={group.sizes['W_c']})" if "W_c" in group.sizes else ""


@presets_app.command("show", short_help="Every field of one preset, with its provenance.")
def presets_show(
    name: Annotated[Optional[str], typer.Argument(help="Preset name (or give --preset, --preset-file or --config).")] = None,
    preset: PresetOpt = None,
    preset_file: PresetFileOpt = None,
    config: ConfigOpt = None,
    fmt: FormatOpt = None,
    output: OutputOpt = None,
) -> None:
    """Every field of one preset -- layer groups, parameter counts, where it came from.

    Example: costcalc presets show llama-3.1-8b
    """
    if name and preset:
        raise CostcalcError(f"give the preset once: {name!r} or --preset {preset!r}")
    if not (name or preset or preset_file or config):
        raise CostcalcError("give a preset name: costcalc presets show NAME (see 'costcalc presets'), "
                            "or --preset-file PATH or --config config.json")
    if preset and "," in preset:
        raise CostcalcError("presets show takes one preset")
    spec = model(name or preset, preset_file, config)
    row = {**_summary(spec), **_groups(spec), **{f"stated.{k}": v for k, v in spec.stated.items()},
           **{f"source.{k}": v for k, v in spec.source.items()}}
    if output_format(fmt, outputs.target(output)) == "table":
        write_fields(output, row, _show)
        return
    emit([row], fmt, output)


@presets_app.command("import", short_help="Write a preset file from a Hugging Face config.json.")
def presets_import(
    config: Annotated[Path, typer.Argument(help="A Hugging Face config.json.", metavar="CONFIG")],
    name: Annotated[str, typer.Option("--name", metavar="NAME",
                                      help="The preset's name (also its file name): letters, digits, . _ -")] = ...,
    output: Annotated[Optional[str], typer.Option(
        "--output", "-o", metavar="FILE", help="Where to write the preset (- for standard output).  "
                                               "(default: NAME.json here)")] = None,
    title: Annotated[Optional[str], typer.Option(help="A readable title.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing preset file.")] = False,
    user: Annotated[bool, typer.Option("--user", help="Write it into your presets folder ($COSTCALC_HOME/presets, "
                                                      "else ~/.config/costcalc/presets), where -p NAME finds it.")] = False,
) -> None:
    """Write a preset file from a config.json, mapped field by field (unknown fields are errors).

    Example: costcalc presets import config.json --name my-model
    """
    import json

    from .. import hf
    from ..spec import check_name, from_dict

    check_name(name, "--name")
    if name.lower().endswith(".json"):
        raise CostcalcError(f"--name {name!r}: give the name without .json (the file is NAME.json)")
    if user and output is not None:
        raise CostcalcError("give one of --user or --output, not both")
    if user:
        folder = presets.user_folder()
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CostcalcError(f"cannot make the presets folder {str(folder)!r}: {exc.strerror or exc}") from None
        output = str(folder / f"{name}.json")
    dest = outputs.target(f"{name}.json" if output is None else output)
    if dest.kind == "file" and dest.path.exists() and not force:
        raise CostcalcError(f"{dest.shown!r} exists; pass --force to replace it")
    spec = hf.load(config, name)
    data = spec.to_dict()
    if title:
        data["title"] = title
    from_dict(data, origin=f"preset {name!r}")   # what is written loads back
    outputs.write_text(dest, json.dumps(data, indent=2) + "\n")
    typer.echo(f"wrote {dest.printed} ({spec.arch}, {len(spec.groups)} layer group{'s' if len(spec.groups) > 1 else ''}, "
               f"{units.params(calc.parameters(spec)['total_params'])} parameters)"
               + (f"; use it as -p {name}" if user else
                  f"; use it as --preset-file {dest.printed}" if dest.kind == "file" else ""), err=True)


def _summary(spec) -> dict:
    row = {"preset": spec.name, "title": spec.title, "arch": spec.arch,
           **{k: v for k, v in spec.sizes.items()}}
    if spec.uniform and "d_h" in spec.sizes:
        row.update(vocab.derived(spec.sizes))
    if spec.state_dtype:
        row["state_dtype"] = spec.state_dtype
    from ..weights import DEFAULT, summary

    # the weight formats it ships in (costcalc.weights); a model that names none: bf16 for every matrix
    row["dtypes"] = summary(spec.dtypes) if spec.dtypes else f"{DEFAULT} (default)"
    row["p_lin"] = calc.executed_linear_params(spec)
    params = calc.parameters(spec)
    row.update({k: params[k] for k in ("total_params", "active_params", "embedding_params", "lm_head_params",
                                       "tied_embeddings")})
    if spec.mtp is not None:     # apart from the decoder's counts (docs/cost-model.md, "MTP layers")
        g = spec.mtp
        row["mtp"] = " ".join([f"{g.count} x {g.arch.removeprefix('mtp:')} + eh_proj"] + [f"{k}={v}" for k, v in g.sizes.items()
                                                                    if spec.groups[-1].sizes.get(k) != v])
        row.update({k: params[k] for k in ("mtp_params", "mtp_active_params")})
    return row


def _groups(spec) -> dict:
    if spec.uniform:
        return {}
    return {f"layers[{i}]": " ".join([f"{g.count} x {g.arch}"]
                                     + [f"{k}={v}" for k, v in g.sizes.items() if spec.sizes.get(k) != v])
            for i, g in enumerate(spec.groups, start=1)}


def _show(key: str, value) -> str:
    if key.endswith("_params") and isinstance(value, int):
        return f"{value:,} ({units.params(value)})"
    return str(value)
