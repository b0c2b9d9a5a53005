"""Commands that evaluate a workload: prefill, chunked, decode, generate, train."""
from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from .. import calc, notes, pipeline, training
from ..errors import CostcalcError
from ..evaluate import Options, Query
from ..ranges import check_rows
from ..vocab import Choice, WindowCache
from .options import (RANGE_HELP, AcceptanceOpt, BatchOpt, ConfigOpt, Convention, ConventionOpt, DraftOpt,
                      DraftTokensOpt, DraftTpOpt, FormatOpt, Logits, LogitsOpt, Mla,
                      MlaOpt, OutputOpt, PresetFileOpt, PresetOpt, TileOpt, Traffic, WideOpt, WindowCacheOpt, axes,
                      conventions, for_models, int_list, mla_form, models, warn, with_layout,
                      with_some_traffic, with_traffic)
from .emit import concat, emit, interleave
from .options import speculation as speculation_fields
from .options import window_cache as cache_choice
from .options import tile as parse_tile
from .options import whole_number

BatchMaxOpt = Annotated[str, typer.Option(
    "--batch", "-b", metavar="B", help="Batch size B; a list or range sweeps (4,8 or 1:64:x2); max (with --device): "
                                      "the largest batch whose weights and KV cache fit at each point.")]


def _wants_max(batch: str, machine: Any) -> bool:
    """Whether ``--batch max`` is asked (it needs a device: the batch is what fits on it)."""
    if batch.strip().lower() != "max":
        return False
    if machine is None:
        raise CostcalcError("--batch max needs a device: --device NAME (see 'costcalc devices') or --device-file PATH "
                            "(the largest batch that fits on it)")
    return True


def _max_points(query: Query, points: dict, held: list[int]) -> dict:
    """The points with each one's batch the largest whose weights and cache (``held`` tokens a
    sequence after the step) fit on the query's device (``fitting.max_batch``); an error where not
    even one sequence (one a data-parallel replica) fits."""
    from .. import fitting

    found: dict[int, int] = {}
    for tokens in held:
        if tokens not in found:
            found[tokens] = fitting.max_batch(query, tokens)
            if found[tokens] == 0:
                dp = query.options.layout.dp
                where = f" under {query.options.layout.label}" if not query.options.layout.single else ""
                raise CostcalcError(f"--batch max: {query.spec.name} does not fit on {query.machine.device.name}{where} "
                                    f"even at batch {dp} with {tokens} tokens a sequence held (weights + KV cache over "
                                    f"{1 - fitting.RESERVE:.0%} of its memory; see 'costcalc memory')")
    return {**points, "batch": [found[t] for t in held]}


def _fit_warning(table: Any) -> None:
    """One warning line naming the rows whose weights and cache do not fit on the device."""
    from .. import fitting

    if "fits" in table:
        line = fitting.warning(calc.rows(table))
        if line:
            warn(line)


@with_layout
@with_traffic
def prefill(
    preset: PresetOpt = None,
    preset_file: PresetFileOpt = None,
    config: ConfigOpt = None,
    seq: Annotated[Optional[str], typer.Option(
        "--seq", "-s", metavar="S", help=f"Prompt length S (new tokens C with --cached-prefix); {RANGE_HELP}.")] = None,
    batch: BatchMaxOpt = "1",
    lengths: Annotated[Optional[str], typer.Option(
        metavar="S1,S2,..", help="One variable-length batch: the prompt lengths, e.g. 100,2000,512.")] = None,
    padded: Annotated[bool, typer.Option(
        "--padded", help="With --lengths: charge the padded shape B x max length.")] = False,
    cached_prefix: Annotated[Optional[str], typer.Option(
        "--cached-prefix", metavar="T", help=f"Tokens T already cached before the --seq new ones; {RANGE_HELP}.")] = None,
    convention: ConventionOpt = Convention.causal,
    tile: TileOpt = None,
    logits: LogitsOpt = Logits.last,
    mla: MlaOpt = Mla.auto,
    window_cache: WindowCacheOpt = WindowCache.whole,
    layout: dict = None,
    traffic: Traffic = Traffic(),
    fmt: FormatOpt = None,
    output: OutputOpt = None,
    wide: WideOpt = False,
) -> None:
    """Prefill FLOPs: uniform prompts, a variable-length batch, or new tokens over a cached prefix.

    Example: costcalc prefill --preset llama-3.1-8b --seq 4096
    """
    specs = models(preset, preset_file, config)
    kinds = conventions(convention)
    chosen, mla = parse_tile(tile, kinds), mla_form(mla, specs)
    cache = cache_choice(window_cache, specs, kinds)
    if cached_prefix is None and cache != "whole":
        warn(f"--window-cache {cache} does nothing without --cached-prefix (a prefill caches nothing before it)")
    precision, machine = for_models(traffic, specs)
    overlap_alone(layout, machine)
    if lengths is not None:   # one batch of its own lengths, under the whole window cache
        given = {"--seq": seq, "--cached-prefix": cached_prefix, "--batch": None if batch == "1" else batch}
        each = _options(kinds, logits=logits.value, tile=chosen, mla=mla, **layout)
        queries = [Query(spec, "varlen_prefill", o, precision, machine) for spec in specs for o in each]
        emit(_varlen(queries, lengths, padded, given), fmt, output, wide=wide)
        return
    if seq is None:
        raise CostcalcError("give --seq (or --lengths for a variable-length batch)")
    if padded:
        raise CostcalcError("--padded applies only with --lengths")
    maximum = _wants_max(batch, machine)
    batch = "1" if maximum else batch
    if cached_prefix is None:
        points = axes("prefill", len(specs) * len(kinds), seq=(seq, "--seq"), batch=(batch, "--batch"))
    else:
        points = axes("cached_prefill", len(specs) * len(kinds), chunk=(seq, "--seq"),
                      prefix=(cached_prefix, "--cached-prefix"), batch=(batch, "--batch"))
    name = "prefill" if cached_prefix is None else "cached_prefill"
    each = _options(kinds, logits=logits.value, tile=chosen, mla=mla,
                    window_cache="whole" if cached_prefix is None else cache, **layout)
    at = {spec.name: points for spec in specs}
    if maximum:
        held = list(map(int, points["seq"])) if cached_prefix is None else \
            [int(p) + int(c) for p, c in zip(points["prefix"], points["chunk"])]
        at = {spec.name: _max_points(Query(spec, name, each[0], precision, machine), points, held) for spec in specs}
    table = concat([interleave([calc.answer(Query(spec, name, o, precision, machine), **at[spec.name]) for o in each])
                    for spec in specs])
    _fit_warning(table)
    emit(table, fmt, output, wide=wide)


def _varlen(queries: list, lengths: str, padded: bool, given: dict) -> list[dict]:
    """``prefill --lengths``: one variable-length batch a query; the options it conflicts
    with (``given``: flag -> value, None where not given) are errors."""
    if queries[0].traffic:
        raise CostcalcError("--lengths: bytes and time are modelled for uniform prompts; give --seq")
    for flag, value in given.items():
        if value is not None and flag != "--batch":
            raise CostcalcError(f"--lengths and {flag} conflict: a variable-length batch has its own lengths")
    if given["--batch"] is not None:
        raise CostcalcError("--lengths and --batch conflict: the batch is the number of lengths")
    sizes = int_list(lengths, "--lengths")
    return [calc.varlen(query, sizes, padded) for query in queries]


def overlap_alone(layout: dict, machine) -> None:
    """--overlap given without a device does nothing (it changes time only): a warning says so."""
    if machine is None and layout.get("overlap") is not None:
        warn(f"--overlap {layout['overlap']} does nothing without --device (it changes time, not FLOPs, bytes or "
             f"memory)")


def _options(kinds: list[str], **given: Any) -> list[Options]:
    """The options of a command (``given``: the fields of ``Options`` it sets), one record per
    convention asked for."""
    return [Options(c, **given) for c in kinds]


@with_layout
@with_traffic
def chunked(
    preset: PresetOpt = None,
    preset_file: PresetFileOpt = None,
    config: ConfigOpt = None,
    seq: Annotated[str, typer.Option("--seq", "-s", metavar="S", help="Prompt length S.")] = ...,
    chunk: Annotated[str, typer.Option("--chunk", "-c", metavar="C", help="Chunk size C (the last chunk may be shorter).")] = ...,
    prefix: Annotated[str, typer.Option(metavar="T", help="Tokens T cached before the prompt.")] = "0",
    batch: BatchOpt = "1",
    convention: ConventionOpt = Convention.both,
    tile: TileOpt = None,
    logits: LogitsOpt = Logits.last,
    mla: MlaOpt = Mla.auto,
    window_cache: WindowCacheOpt = WindowCache.whole,
    layout: dict = None,
    traffic: Traffic = Traffic(),
    fmt: FormatOpt = None,
    output: OutputOpt = None,
    wide: WideOpt = False,
) -> None:
    """The chunk schedule of one prompt: a row per chunk, the total, and the unchunked pass.

    Example: costcalc chunked --preset llama-3.1-8b --seq 8192 --chunk 2048
    """
    tables, notes = [], []
    points = calc.rows(axes("chunked", seq=(seq, "--seq"), chunk=(chunk, "--chunk"), prefix=(prefix, "--prefix"),
                            batch=(batch, "--batch")))
    specs, kinds = models(preset, preset_file, config), conventions(convention)
    chosen, mla = parse_tile(tile, kinds), mla_form(mla, specs)
    cache = cache_choice(window_cache, specs, kinds)
    precision, machine = for_models(traffic, specs)
    overlap_alone(layout, machine)
    count = 0
    for point in points:   # every schedule's size is checked before any is built
        count += len(calc.chunk_schedule(int(point["seq"]), int(point["chunk"]))) + 2
    check_rows(count * len(specs) * len(kinds), "the chunk schedules")
    each = _options(kinds, logits=logits.value, tile=chosen, mla=mla, window_cache=cache, **layout)
    for spec in specs:
        for point in points:
            for o in each:
                query = Query(spec, "chunked", o, precision, machine)
                sizes = {k: int(point[k]) for k in ("seq", "chunk", "prefix", "batch")}
                tables.append(calc.schedule(query, **sizes))
                total, single = tables[-1]["total_flops"][-2], tables[-1]["total_flops"][-1]
                notes.append(_chunk_note(spec.name, {**sizes, "convention": o.convention.value}, total, single))
    _fit_warning(concat(tables))
    emit(concat(tables), fmt, output, notes[:MAX_NOTES] + _more(len(notes) - MAX_NOTES), wide)


MAX_NOTES = 12   # schedules noted one by one; the rest are counted


def _more(n: int) -> list[str]:
    return [f"... and {n} more schedules (the total and unchunked rows say the same)."] if n > 0 else []


def _chunk_note(name: str, p: dict, total: int, single: int) -> str:
    where = f"{name}, {p['convention']}, seq {p['seq']}, chunk {p['chunk']}"
    if total == single:
        return f"{where}: the chunked total equals the unchunked prefill exactly."
    return (f"{where}: chunking changes the total by {total - single:+,} FLOPs "
            f"({(total - single) / single:+.2%}) -- each chunk is charged its own rectangle "
            f"(chunk x keys so far), not one seq x seq square.")


@with_layout
@with_traffic
def decode(
    preset: PresetOpt = None,
    preset_file: PresetFileOpt = None,
    config: ConfigOpt = None,
    context: Annotated[str, typer.Option(
        "--context", "-t", metavar="T", help=f"Tokens T already cached; {RANGE_HELP}.")] = ...,
    batch: BatchMaxOpt = "1",
    convention: ConventionOpt = Convention.causal,
    tile: TileOpt = None,
    mla: MlaOpt = Mla.auto,
    window_cache: WindowCacheOpt = WindowCache.whole,
    draft: DraftOpt = None,
    draft_tokens: DraftTokensOpt = None,
    acceptance: AcceptanceOpt = None,
    draft_tp: DraftTpOpt = None,
    layout: dict = None,
    traffic: Traffic = Traffic(),
    fmt: FormatOpt = None,
    output: OutputOpt = None,
    wide: WideOpt = False,
) -> None:
    """One decode step over T cached tokens, and its cost per output token.

    Example: costcalc decode --preset llama-3.1-405b --context 128k --batch 64
    """
    specs, kinds = models(preset, preset_file, config), conventions(convention)
    chosen, mla = parse_tile(tile, kinds), mla_form(mla, specs)
    cache = cache_choice(window_cache, specs, kinds)
    precision, machine = for_models(traffic, specs)
    overlap_alone(layout, machine)
    maximum = _wants_max(batch, machine)
    points = axes("decode", len(specs) * len(kinds), context=(context, "--context"),
                  batch=("1" if maximum else batch, "--batch"))
    each = _options(kinds, tile=chosen, mla=mla, window_cache=cache,
                    **speculation_fields(draft, draft_tokens, acceptance, draft_tp=draft_tp), **layout)
    at = {spec.name: _max_points(Query(spec, "decode", each[0], precision, machine), points,
                                 [int(t) + _written(each[0]) for t in points["context"]]) if maximum else points
          for spec in specs}
    table = concat([interleave([calc.answer(Query(spec, "decode", o, precision, machine), **at[spec.name])
                                for o in each]) for spec in specs])
    _fit_warning(table)
    emit(table, fmt, output, [_decode_note(specs, cache)] + ([notes.SPECULATION] if acceptance else []), wide)


def _written(options: Options) -> int:
    """Tokens a decode step writes to a sequence's cache: 1, or a speculative step's K + 1 (its verify)."""
    return 1 if options.acceptance is None else options.draft_tokens + 1


@with_layout
@with_traffic
def generate(
    preset: PresetOpt = None,
    preset_file: PresetFileOpt = None,
    config: ConfigOpt = None,
    prompt: Annotated[str, typer.Option("--prompt", "-s", metavar="S", help=f"Prompt length S; {RANGE_HELP}.")] = ...,
    new: Annotated[str, typer.Option("--new", "-n", metavar="N", help=f"Output tokens N; {RANGE_HELP}.")] = ...,
    batch: BatchMaxOpt = "1",
    convention: ConventionOpt = Convention.causal,
    tile: TileOpt = None,
    logits: LogitsOpt = Logits.last,
    mla: MlaOpt = Mla.auto,
    window_cache: WindowCacheOpt = WindowCache.whole,
    draft: DraftOpt = None,
    draft_tokens: DraftTokensOpt = None,
    acceptance: AcceptanceOpt = None,
    draft_tp: DraftTpOpt = None,
    layout: dict = None,
    traffic: Traffic = Traffic(),
    fmt: FormatOpt = None,
    output: OutputOpt = None,
    wide: WideOpt = False,
) -> None:
    """A whole generation: prefill of S, then N-1 decode steps (the j-th reads S+j keys).

    Example: costcalc generate --preset mixtral-8x7b --prompt 8192 --new 1024 --batch 8
    """
    specs, kinds = models(preset, preset_file, config), conventions(convention)
    chosen, mla = parse_tile(tile, kinds), mla_form(mla, specs)
    cache = cache_choice(window_cache, specs, kinds)
    precision, machine = for_models(traffic, specs)
    overlap_alone(layout, machine)
    maximum = _wants_max(batch, machine)
    points = axes("generate", 3 * len(specs) * len(kinds), seq=(prompt, "--prompt"), new_tokens=(new, "--new"),
                  batch=("1" if maximum else batch, "--batch"))
    each = _options(kinds, logits=logits.value, tile=chosen, mla=mla, window_cache=cache,
                    **speculation_fields(draft, draft_tokens, acceptance, draft_tp=draft_tp), **layout)
    held = [int(s_) + int(n) - 1 for s_, n in zip(points["seq"], points["new_tokens"])]   # after the last step
    at = {spec.name: _max_points(Query(spec, "generate", each[0], precision, machine), points, held)
          if maximum else points for spec in specs}
    table = concat([interleave([calc.generation(Query(spec, "generate", o, precision, machine), **at[spec.name])
                                for o in each], block=3) for spec in specs])
    _fit_warning(table)
    emit(table, fmt, output, [notes.SPECULATION_GENERATE] if acceptance else (), wide=wide)


OptimizerChoice = Choice("OptimizerChoice", {name: name for name in training.OPTIMIZERS})
ZeroOpt = Annotated[int, typer.Option(
    "--zero", parser=whole_number("--zero"), metavar="Z", help="ZeRO stage over the --dp devices: 0 (DDP), 1 (optimizer state sharded), 2 (and "
                                "gradients), 3 (and weights: FSDP's full sharding).")]
RecomputeOpt = Annotated[Optional[training.Recompute], typer.Option(
    "--recompute", show_default=False, help="Activations kept for the backward: none (every saved tensor; the "
                                            "default), selective (attention core recomputed) or full (each layer's "
                                            "input only).")]
ScheduleChoice = Choice("ScheduleChoice", {name: name for name in pipeline.SCHEDULES})
ScheduleOpt = Annotated[Optional[ScheduleChoice], typer.Option(
    "--schedule", show_default=False, help="A pipeline's (--pp) schedule: 1f1b (the default), gpipe or interleaved "
                                           "(with --virtual-stages).")]
VirtualOpt = Annotated[int, typer.Option(
    "--virtual-stages", parser=whole_number("--virtual-stages"), metavar="V", help="Model chunks a pipeline rank holds (the interleaved schedule).")]
OptimizerOpt = Annotated[OptimizerChoice, typer.Option(
    "--optimizer", help="Optimizer convention: adam (bf16 weights and gradients, fp32 master weights and two fp32 "
                        "moments: 16 bytes a parameter).")]


@with_layout
@with_some_traffic("device", "device_file")
def train(
    preset: PresetOpt = None,
    preset_file: PresetFileOpt = None,
    config: ConfigOpt = None,
    seq: Annotated[str, typer.Option("--seq", "-s", metavar="S", help=f"Sequence length S; {RANGE_HELP}.")] = ...,
    batch: BatchOpt = "1",
    convention: ConventionOpt = Convention.causal,
    tile: TileOpt = None,
    mla: MlaOpt = Mla.auto,
    zero: ZeroOpt = 0,
    recompute: RecomputeOpt = None,
    optimizer: OptimizerOpt = OptimizerChoice("adam"),
    schedule: ScheduleOpt = None,
    virtual_stages: VirtualOpt = 1,
    layout: dict = None,
    traffic: Traffic = Traffic(),
    fmt: FormatOpt = None,
    output: OutputOpt = None,
    wide: WideOpt = False,
) -> None:
    """Training step: forward with all-position logits x3, beside the 6P rule of thumb; with a
    layout (--tp, --ep, --pp, --dp, --sp, --zero), --recompute or --device: per device FLOPs,
    collectives, memory and time; under --pp per stage, with the schedule's bubble and makespan.

    Example: costcalc train --preset llama-3.1-70b --seq 8192 --batch 16
    """
    specs, kinds = models(preset, preset_file, config), conventions(convention)
    chosen, mla = parse_tile(tile, kinds), mla_form(mla, specs)
    points = axes("train", len(specs) * len(kinds), seq=(seq, "--seq"), batch=(batch, "--batch"))
    each = _options(kinds, logits="all", tile=chosen, mla=mla, zero=zero,
                    recompute="none" if recompute is None else training.Recompute(recompute).value,
                    optimizer=OptimizerChoice(optimizer).value,
                    schedule=None if schedule is None else ScheduleChoice(schedule).value,
                    virtual_stages=virtual_stages, **layout)
    machine = traffic.machine
    overlap_alone(layout, machine)
    queries = [[Query(spec, "train", o, None, machine) for o in each] for spec in specs]
    if each[0].layout.pp == 1 and (schedule is not None or virtual_stages != 1):
        raise CostcalcError("--schedule and --virtual-stages order a pipeline's micro-batches: they need --pp > 1")
    asked = not each[0].layout.single or machine is not None or recompute is not None
    if not asked:
        emit(concat([interleave([calc.answer(q, **points) for q in row]) for row in queries]),
             fmt, output, [notes.TRAIN], wide)
        return
    emit(concat([interleave([training.extend(q, calc.answer(training.single(q), **points)) for q in row])
                 for row in queries]),
         fmt, output, [notes.TRAIN, training.NOTE] + ([training.PIPELINE_NOTE] if each[0].layout.pp > 1 else []),
         wide)


def _decode_note(specs, cache: str = "whole") -> str:
    if any(g.block.v4 for spec in specs for g in spec.groups):
        return ("A DeepSeek-V4 layer's decode step reads min(T+1, W) window keys (its own included) and "
                "floor((T+1) / R_c) compressed entries, at most k_I of them under causal in a compressed sparse "
                "layer (every one under full, and its indexer scores every one under both).")
    note = "A decode step reads T+1 keys (its own included)"
    chunks = any(g.block.attention == "chunk" for spec in specs for g in spec.groups)
    chunk_note = "; in a chunked layer causal counts those of its own chunk, (T mod W_c) + 1" if chunks else ""
    if any(g.block.sparse for spec in specs for g in spec.groups):
        chunk_note += ("; in a sparse-attention layer causal counts the min(T+1, k_I) its indexer selects (the "
                       "indexer scores all T+1), full all T+1")
        if not chunks and not any(spec.windows for spec in specs):
            return note + chunk_note + "."
    if any(spec.windows for spec in specs):
        if cache == "rolling":
            return note + ("; in a sliding-window layer with a rolling cache it holds only min(T+1, W) of "
                           f"them, under causal and full alike{chunk_note}.")
        return note + ("; in a sliding-window layer causal counts min(T+1, W) of them, full all T+1 "
                       f"(the rectangle of the shapes; --window-cache rolling: min(T+1, W)){chunk_note}.")
    if chunks:
        return note + f"{chunk_note}, full all T+1 (the rectangle of the shapes)."
    return note + ": causal and full agree."
