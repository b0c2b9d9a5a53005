"""Commands that evaluate a workload: prefill, chunked, decode, generate, train."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from .. import calc, notes
from ..errors import CostcalcError
from ..ranges import grid, parse
from .options import (RANGE_HELP, BatchOpt, Convention, ConventionOpt, FormatOpt, Logits, LogitsOpt,
                      OutputOpt, MlaOpt, PresetFileOpt, PresetOpt, ConfigOpt, TileOpt, concat, conventions, emit, int_list, interleave,
                      models)
from .options import tile as parse_tile


def prefill(
    preset: PresetOpt = None,
    preset_file: PresetFileOpt = None,
    config: ConfigOpt = None,
    seq: Annotated[Optional[str], typer.Option(
        "--seq", "-s", help=f"Prompt length S (new tokens C with --cached-prefix); {RANGE_HELP}.")] = None,
    batch: BatchOpt = "1",
    lengths: Annotated[Optional[str], typer.Option(
        help="One variable-length batch: the prompt lengths, e.g. 100,2000,512.")] = None,
    padded: Annotated[bool, typer.Option(
        "--padded", help="With --lengths: charge the padded shape B x max length.")] = False,
    cached_prefix: Annotated[Optional[str], typer.Option(
        "--cached-prefix", help=f"Tokens T already cached before the --seq new ones; {RANGE_HELP}.")] = None,
    convention: ConventionOpt = Convention.causal,
    tile: TileOpt = "128",
    logits: LogitsOpt = Logits.last,
    mla: MlaOpt = "auto",
    fmt: FormatOpt = None,
    output: OutputOpt = None,
) -> None:
    """Prefill FLOPs: uniform prompts, a variable-length batch, or new tokens over a cached prefix."""
    specs = models(preset, preset_file, config)
    kinds = conventions(convention)
    if lengths is not None:
        for flag, given in (("--seq", seq), ("--cached-prefix", cached_prefix)):
            if given is not None:
                raise CostcalcError(f"--lengths and {flag} conflict: a variable-length batch has its own lengths")
        if batch != "1":
            raise CostcalcError("--lengths and --batch conflict: the batch is the number of lengths")
        sizes = int_list(lengths, "--lengths")
        emit([calc.varlen_prefill(spec, sizes, padded, c, logits.value, parse_tile(tile), mla)
              for spec in specs for c in kinds], fmt, output)
        return
    if seq is None:
        raise CostcalcError("give --seq (or --lengths for a variable-length batch)")
    if padded:
        raise CostcalcError("--padded applies only with --lengths")
    seqs, batches, chosen = parse(seq, "--seq"), parse(batch, "--batch"), parse_tile(tile)
    if cached_prefix is None:
        points = grid(seq=seqs, batch=batches)
        tables = [interleave([calc.table(spec, "prefill", c, logits.value, chosen, mla, **points) for c in kinds])
                  for spec in specs]
    else:
        points = grid(chunk=seqs, prefix=parse(cached_prefix, "--cached-prefix", minimum=0), batch=batches)
        tables = [interleave([calc.table(spec, "cached_prefill", c, logits.value, chosen, mla, **points)
                              for c in kinds]) for spec in specs]
    emit(concat(tables), fmt, output)


def chunked(
    preset: PresetOpt = None,
    preset_file: PresetFileOpt = None,
    config: ConfigOpt = None,
    seq: Annotated[str, typer.Option("--seq", "-s", help="Prompt length S.")] = ...,
    chunk: Annotated[str, typer.Option("--chunk", "-c", help="Chunk size C (the last chunk may be shorter).")] = ...,
    prefix: Annotated[str, typer.Option(help="Tokens T cached before the prompt.")] = "0",
    batch: BatchOpt = "1",
    convention: ConventionOpt = Convention.both,
    tile: TileOpt = "128",
    logits: LogitsOpt = Logits.last,
    mla: MlaOpt = "auto",
    fmt: FormatOpt = None,
    output: OutputOpt = None,
) -> None:
    """The chunk schedule of one prompt: a row per chunk, the total, and the unchunked pass."""
    rows, notes = [], []
    points = calc.rows(grid(seq=parse(seq, "--seq"), chunk=parse(chunk, "--chunk"),
                            prefix=parse(prefix, "--prefix", minimum=0), batch=parse(batch, "--batch")))
    for spec in models(preset, preset_file, config):
        for p in ({**point, "convention": c} for point in points for c in conventions(convention)):
            schedule = calc.chunked(spec, logits=logits.value, tile=parse_tile(tile), mla=mla,
                                    **{k: v if isinstance(v, str) else int(v) for k, v in p.items()})
            rows += schedule
            total, single = schedule[-2]["total_flops"], schedule[-1]["total_flops"]
            notes.append(_chunk_note(spec.name, p, total, single))
    emit(rows, fmt, output, notes)


def _chunk_note(name: str, p: dict, total: int, single: int) -> str:
    where = f"{name}, {p['convention']}, seq {p['seq']}, chunk {p['chunk']}"
    if total == single:
        return f"{where}: the chunked total equals the unchunked prefill exactly."
    return (f"{where}: chunking changes the total by {total - single:+,} FLOPs "
            f"({(total - single) / single:+.2%}) -- each chunk is charged its own rectangle "
            f"(chunk x keys so far), not one seq x seq square.")


def decode(
    preset: PresetOpt = None,
    preset_file: PresetFileOpt = None,
    config: ConfigOpt = None,
    context: Annotated[str, typer.Option(
        "--context", "-t", help=f"Tokens T already cached; {RANGE_HELP}.")] = ...,
    batch: BatchOpt = "1",
    convention: ConventionOpt = Convention.causal,
    mla: MlaOpt = "auto",
    fmt: FormatOpt = None,
    output: OutputOpt = None,
) -> None:
    """One decode step over T cached tokens, and its cost per output token."""
    specs = models(preset, preset_file, config)
    points = grid(context=parse(context, "--context"), batch=parse(batch, "--batch"))
    emit(concat([interleave([calc.table(spec, "decode", c, mla=mla, **points) for c in conventions(convention)])
                 for spec in specs]),
         fmt, output, [_decode_note(specs)])


def generate(
    preset: PresetOpt = None,
    preset_file: PresetFileOpt = None,
    config: ConfigOpt = None,
    prompt: Annotated[str, typer.Option("--prompt", "-s", help=f"Prompt length S; {RANGE_HELP}.")] = ...,
    new: Annotated[str, typer.Option("--new", "-n", help=f"Output tokens N; {RANGE_HELP}.")] = ...,
    batch: BatchOpt = "1",
    convention: ConventionOpt = Convention.causal,
    tile: TileOpt = "128",
    logits: LogitsOpt = Logits.last,
    mla: MlaOpt = "auto",
    fmt: FormatOpt = None,
    output: OutputOpt = None,
) -> None:
    """A whole generation: prefill of S, then N-1 decode steps (the j-th reads S+j keys)."""
    specs = models(preset, preset_file, config)
    points = grid(seq=parse(prompt, "--prompt"), new_tokens=parse(new, "--new"), batch=parse(batch, "--batch"))
    emit(concat([interleave([calc.generate_table(spec, c, logits.value, parse_tile(tile), mla, **points)
                             for c in conventions(convention)], block=3) for spec in specs]), fmt, output)


def train(
    preset: PresetOpt = None,
    preset_file: PresetFileOpt = None,
    config: ConfigOpt = None,
    seq: Annotated[str, typer.Option("--seq", "-s", help=f"Sequence length S; {RANGE_HELP}.")] = ...,
    batch: BatchOpt = "1",
    convention: ConventionOpt = Convention.causal,
    tile: TileOpt = "128",
    mla: MlaOpt = "auto",
    fmt: FormatOpt = None,
    output: OutputOpt = None,
) -> None:
    """Training step: forward with all-position logits x3, beside the 6P rule of thumb."""
    specs = models(preset, preset_file, config)
    points = grid(seq=parse(seq, "--seq"), batch=parse(batch, "--batch"))
    emit(concat([interleave([calc.table(spec, "train", c, "all", parse_tile(tile), mla, **points)
                             for c in conventions(convention)]) for spec in specs]), fmt, output, [notes.TRAIN])


def _decode_note(specs) -> str:
    note = "A decode step reads T+1 keys (its own included)"
    if any(spec.windows for spec in specs):
        return note + ("; in a sliding-window layer causal counts min(T+1, W) of them, full all T+1 "
                       "(the rectangle of the shapes).")
    return note + ": causal and full agree."
