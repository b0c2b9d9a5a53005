"""What every command shares: the model options, the output options, list parsing, emitting rows."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Mapping, Optional, Sequence, Union

import typer

from .. import outputs, presets, ranges, vocab
from ..errors import CostcalcError, quote
from ..render import FORMATS
from ..spec import ModelSpec
from ..vocab import CONVENTION_SETS, DEFAULT_TILE, Choice, Dtype, MlaForm, Overlap, Routing, WindowCache

if TYPE_CHECKING:   # bytes and time load only when asked for
    from ..roofline import Machine, Precision


# --format: the renderer's formats
Format = Choice("Format", {f: f for f in FORMATS})
# --convention: one of the conventions, or a set of them (vocab.CONVENTION_SETS)
Convention = Choice("Convention", {**{c.name: c.value for c in vocab.Convention}, **{k: k for k in CONVENTION_SETS}})
# --logits: the modes a command offers (``none``, a chunk without the LM head, is the calculator's own)
Logits = Choice("Logits", {m.name: m.value for m in vocab.Logits if m != vocab.Logits.none})


def whole_number(option: str, read=None):
    """A typer ``parser`` for an integer option: its text read as ``ranges.whole`` reads it
    (``1e3`` is 1000, ``1.5e3`` 1500; ``1e-3`` or ``1.5`` an error naming the text); ``read``
    another reader of the same signature (``count``: a count of tokens or sequences, bounded)."""
    reader = read or ranges.whole

    def parse(text: Any) -> int:
        if isinstance(text, int):   # the default
            return text
        try:
            return reader(str(text), option)
        except CostcalcError as exc:   # typer names the option: "Invalid value for '--tp': ..."
            raise typer.BadParameter(str(exc).removeprefix(f"{option}: ")) from None
    return parse


def count(option: str):
    """A typer ``parser`` for one count of tokens or sequences (``--context`` of speculate, a token
    budget): a whole number as ``whole_number`` reads it, at most ``ranges.MAX_VALUE`` as every
    length and batch option is."""
    return whole_number(option, ranges.number)


BudgetOpt = Annotated[Optional[int], typer.Option(
    "--max-batched-tokens", parser=count("--max-batched-tokens"), metavar="K", show_default=False,
    help="Tokens an iteration may run, prompt chunks and decode tokens together (vLLM's max_num_batched_tokens; "
         "serve's default 8192); plan: with --batching continuous.")]


def check_output(value: Optional[str]) -> Optional[str]:
    """Typer callback: an --output that cannot be written is an error before any work."""
    if value is not None:
        outputs.target(value)
    return value


PresetOpt = Annotated[Optional[str], typer.Option(
    "--preset", "-p", metavar="NAME", help="Built-in preset name (see 'costcalc presets'); a comma list compares several.")]
PresetFileOpt = Annotated[Optional[Path], typer.Option(
    "--preset-file", metavar="PATH", help="A preset JSON file of your own (same fields as presets/*.json).")]
ConfigOpt = Annotated[Optional[Path], typer.Option(
    "--config", metavar="CONFIG", help="A Hugging Face config.json: the model it describes (see 'costcalc presets import').")]
Mla = MlaForm   # the core's own choices, shared


MlaOpt = Annotated[Mla, typer.Option(
    "--mla", help="MLA form for models with MLA layers: auto (absorbed for decode steps, naive otherwise), "
                  "naive, absorbed, or expanded (naive, with kv_b_proj re-expanding every cached latent "
                  "at each forward, as Hugging Face runs DeepSeek).")]
DraftOpt = Annotated[Optional[str], typer.Option(
    "--draft", metavar="DRAFT", show_default=False,
    help="A draft at each decode step: mtp (the model's multi-token-prediction module: eh_proj, its decoder "
         "block over its own KV cache, and the draft token's logits; the draft column), or a draft model "
         "(with --acceptance: speculative decoding): a preset's name, a preset file or a Hugging Face "
         "config.json (a path: it has a / or ends in .json). plan: the drafter of its speculation axis "
         "(default: none; with --acceptance, mtp).")]
DraftTokensOpt = Annotated[Optional[int], typer.Option(
    "--draft-tokens", parser=whole_number("--draft-tokens"), metavar="K", show_default=False,
    help="Speculative decoding: tokens K the draft proposes a step (default 1, or as many as --acceptance "
         "gives by position).")]
DraftTpOpt = Annotated[Optional[int], typer.Option(
    "--draft-tp", parser=whole_number("--draft-tp"), metavar="T", show_default=False,
    help="Under a parallel layout: the draft model's tensor parallelism, the target's --tp or 1 (the whole draft "
         "on every device).  (default: the target's --tp)")]
AcceptanceOpt = Annotated[Optional[str], typer.Option(
    "--acceptance", metavar="A", show_default=False,
    help="Speculative decoding: the rate a draft token is accepted, in [0, 1): one (0.8), or one per drafted "
         "position (0.8,0.7,0.6). A step's rows add expected_tokens_per_step and, with a device, "
         "time_per_token_s.")]


def draft(value: Optional[str]) -> str:
    """``--draft``: ``mtp``, or none where not given (a draft model: ``speculation``)."""
    if value is None:
        return "none"
    value = value.lower()   # names in any case (MTP)
    if value != "mtp":
        raise CostcalcError(f"--draft accepts mtp (the model's multi-token-prediction layers), got {quote(value)}")
    return value


def draft_model(text: str) -> ModelSpec:
    """A draft model named by ``--draft``: a built-in (or the user's) preset, or -- a name with a path
    separator or ending in .json -- a file: a preset file, or a Hugging Face config.json (it has
    ``model_type``), read as ``--preset-file`` and ``--config`` read them."""
    if not (text.endswith(".json") or "/" in text or os.sep in text):
        return presets.load(text)
    from .. import jsonfile

    data = jsonfile.read(text, "draft file")
    if isinstance(data, dict) and "model_type" in data and "name" not in data:
        from .. import hf

        return hf.load(text)
    return presets.load_file(text)


def speculation(value: Optional[str], tokens: Optional[int] = None, acceptance: Optional[str] = None,
                held: bool = False, draft_tp: Optional[int] = None) -> dict:
    """``--draft``, ``--draft-tokens``, ``--acceptance`` and ``--draft-tp`` as fields of ``evaluate.Options``:
    the draft (mtp, or a preset's name: ``draft_model``), K, the rates as exact fractions and the draft
    model's tp. A draft model needs a rate unless only ``held`` (memory: its weights and cache beside the
    target's)."""
    from fractions import Fraction

    out: dict = {"draft": "none"} if draft_tp is None else {"draft": "none", "draft_tp": draft_tp}
    if value is not None and value.strip().lower() == "mtp":
        out["draft"] = "mtp"
    elif value is not None:
        if not value.strip():
            raise CostcalcError("--draft is mtp, a draft model's preset or its file, got ''")
        try:
            out["draft_model"] = draft_model(value.strip())
        except CostcalcError as exc:
            raise CostcalcError(f"--draft is mtp, a draft model's preset or its file: {exc}") from None
    if acceptance is not None:
        rates = []
        for part in acceptance.split(","):
            try:
                rate = Fraction(part.strip())
            except (ValueError, ZeroDivisionError):
                raise CostcalcError(f"--acceptance takes rates in [0, 1), one or one per drafted position "
                                    f"(0.8 or 0.8,0.7,0.6), got {quote(acceptance)}") from None
            rates.append(rate)
        out["acceptance"] = tuple(rates)
        out["draft_tokens"] = len(rates) if tokens is None and len(rates) > 1 else 1
    if tokens is not None:
        out["draft_tokens"] = tokens
    if out.get("draft_model") is not None and acceptance is None and not held:
        raise CostcalcError(f"--draft {value.strip()}: a draft model runs only as speculative decoding; give "
                            f"--acceptance (the rate its tokens are accepted)")
    return out


WindowCacheOpt = Annotated[WindowCache, typer.Option(
    "--window-cache", help="KV cache of sliding-window layers: whole (every past key kept and masked) or "
                           "rolling (the last W-1 keys); changes full only.")]
DeviceOpt = Annotated[Optional[str], typer.Option(
    "--device", "-d", metavar="NAME", help="A device profile (see 'costcalc devices'): its peaks, bandwidth and "
                                            "memory give the time, the fit and the time crossover.")]
DeviceFileOpt = Annotated[Optional[str], typer.Option(
    "--device-file", metavar="PATH", help="A device profile of your own (see presets/devices/*.json).")]
WeightDtypeOpt = Annotated[Optional[str], typer.Option(
    "--weight-dtype", metavar="FORMAT",
    help="Weight format of every module: bf16, fp16, fp32, fp8, int8, int4 (int8/int4 carry an fp16 scale per "
         "--group-size weights) or a checkpoint format (fp8-block128, fp8-tensor, nvfp4, mxfp4, fp4-block1x32-ue8m0, "
         "gptq-int4-g128, awq-int4-g128, ct-int4-g32; docs/hf-import.md); adds the bytes columns.  (default: the formats the "
         "model ships in, its dtypes; else bf16)")]
KvDtypeOpt = Annotated[Optional[Dtype], typer.Option(
    "--kv-dtype", help="KV cache dtype; adds the bytes columns.  (default: bf16)")]
StateDtypeOpt = Annotated[Optional[Dtype], typer.Option(
    "--state-dtype", show_default=False,
    help="Recurrent state dtype of linear-attention and state-space layers.  (default: the model's state_dtype, "
         "else the KV dtype)")]
IndexDtypeOpt = Annotated[Optional[Dtype], typer.Option(
    "--index-dtype", show_default=False,
    help="Key cache dtype of a sparse-attention indexer (DeepSeek-V3.2, GLM-5, DeepSeek-V4); fp8 keys carry "
         "an fp32 scale per 128 elements, as DeepSeek's reference and vLLM keep them.  (default: the KV dtype, "
         "as transformers keeps them)")]
ActDtypeOpt = Annotated[Optional[Dtype], typer.Option(
    "--act-dtype", help="Activations' dtype, also the compute dtype whose peak times the FLOPs.  (default: bf16)")]
GroupSizeOpt = Annotated[Optional[int], typer.Option(
    "--group-size", parser=whole_number("--group-size"), metavar="N", show_default=False, help="Weights per fp16 scale of int8/int4 weights.  (default: 128)")]
RoutingOpt = Annotated[Optional[Routing], typer.Option(
    "--routing", show_default=False, help="MoE experts a forward reads: expected (uniform top-k: E(1-(1-k/E)^n)) "
                                          "or worst (min(E, n k)).  (default: expected)")]
EfficiencyOpt = Annotated[Optional[str], typer.Option(
    "--efficiency", metavar="C[,M]", help="Fractions of the peak FLOP/s and memory bandwidth reached "
                                           "(calibration), e.g. 0.7,0.85.  (default: 1,1)")]
FormatOpt = Annotated[Optional[Format], typer.Option(
    "--format", "-f", help="Output format.  (default: from --output's suffix, else table)")]
TpOpt = Annotated[int, typer.Option(
    "--tp", parser=whole_number("--tp"), metavar="T", help="Tensor-parallel devices (Megatron column/row split): per-device FLOPs and "
                              "collectives (docs/cost-model.md, Tensor and expert parallelism).")]
EpOpt = Annotated[int, typer.Option(
    "--ep", parser=whole_number("--ep"), metavar="E", help="Expert-parallel devices: 1, T (over the --tp devices) or T x D (with --dp): "
                              "each runs E/ep experts.")]
PpOpt = Annotated[int, typer.Option(
    "--pp", parser=whole_number("--pp"), metavar="P", help="Pipeline-parallel stages (consecutive layers on each, as vLLM splits them): per-stage "
                              "FLOPs, send/recv, bubble (docs/cost-model.md, Pipeline parallelism).")]
DpOpt = Annotated[int, typer.Option(
    "--dp", parser=whole_number("--dp"), metavar="D", help="Data-parallel replicas (each its own requests or micro-batches).")]
SpOpt = Annotated[bool, typer.Option(
    "--sp", help="Sequence parallel: each tensor-parallel all-reduce as a reduce-scatter and an all-gather.")]
MicroBatchesOpt = Annotated[Optional[int], typer.Option(
    "--micro-batches", parser=whole_number("--micro-batches"), metavar="M", show_default=False, help="Micro-batches of B/M sequences a pipeline step is split into (--pp).  "
                                                           "(default: 1, the batch through the stages once)")]
OverlapOpt = Annotated[Optional[Overlap], typer.Option(
    show_default=False, help="Communication against compute: full (hidden where shorter: the floor) or none "
                             "(added, as engines run TP all-reduces).  (default: full)")]
WideOpt = Annotated[bool, typer.Option("--wide", help="Every column in the table, however wide.")]
OutputOpt = Annotated[Optional[str], typer.Option(
    "--output", "-o", callback=check_output, metavar="FILE",
    help="Write to FILE (- for standard output); a FIFO or device is written in place.")]
ConventionOpt = Annotated[Convention, typer.Option(
    help="Attention convention: causal (legal pairs), full (rectangle), tiled (blocks a "
         "tile kernel visits), both (causal+full) or all three.")]
TileOpt = Annotated[Optional[str], typer.Option(
    metavar="QxK", help="Tile of the tiled convention: queries x keys, e.g. 128 or 128x64.  "
                      f"(default: {DEFAULT_TILE[0]}x{DEFAULT_TILE[1]})")]
LogitsOpt = Annotated[Logits, typer.Option(
    help="LM head on the last position of each sequence, or on all positions.")]
BatchOpt = Annotated[str, typer.Option(
    "--batch", "-b", metavar="B", help="Batch size B; a list or range sweeps (4,8 or 1:64:x2).")]
RANGE_HELP = "a list or range sweeps: 1024,4096 or 1k:128k:x2 or 512:4k:512 (k=1024, M=1024^2)"


def model(preset: Optional[str], preset_file: Optional[Path], config: Optional[Path] = None) -> ModelSpec:
    given = [flag for flag, value in (("--preset", preset), ("--preset-file", preset_file), ("--config", config))
             if value]
    if len(given) > 1:
        raise CostcalcError(f"give one of --preset, --preset-file or --config, not {' and '.join(given)}")
    if preset and "," in preset:
        raise CostcalcError(f"--preset {preset!r}: this command takes one preset")
    if preset:
        return presets.load(preset)
    if preset_file:
        return presets.load_file(preset_file)
    if config:
        from .. import hf

        return hf.load(config)
    raise CostcalcError("no model: give --preset NAME, --preset-file PATH or --config config.json")


def conventions(choice: Convention) -> list[str]:
    return list(CONVENTION_SETS.get(choice.value, (choice.value,)))


def axes(workload: str, copies: int = 1, **given: tuple[Optional[str], str]) -> dict[str, Sequence[int]]:
    """The grid of a workload's inputs from option texts (``column=(text, "--flag")``, the
    first outermost), each checked against the minimum the workload registry declares.
    ``copies``: rows each point makes in the whole command (presets x conventions x phases),
    checked against the row cap before the grid is built."""
    from ..core.registry import workload as find

    minimum = {item.column: item.minimum for item in find(workload).inputs}
    values = {column: ranges.parse(text, flag, minimum[column]) for column, (text, flag) in given.items()}
    points = 1
    for column in values.values():
        points *= len(column)
    ranges.check_rows(points * copies, "the command")
    return ranges.grid(**values)


def int_list(text: Optional[str], option: str, minimum: int = 1) -> list[int]:
    """``"1024,4096"``, ``"1k:1M:x2"``, ... -> the integers (see ``costcalc.ranges``)."""
    return list(ranges.parse(text, option, minimum))


def models(preset: Optional[str], preset_file: Optional[Path], config: Optional[Path] = None) -> list[ModelSpec]:
    """One model, or several from ``--preset a,b`` (side by side)."""
    if preset and (preset_file or config):
        raise CostcalcError("give one of --preset, --preset-file or --config")
    if preset and "," in preset:
        names = [name.strip() for name in preset.split(",")]
        if not all(names):
            raise CostcalcError(f"--preset: empty name in {preset!r}")
        return [presets.load(name) for name in dict.fromkeys(names)]
    return [model(preset, preset_file, config)]


def tile(text: Optional[str], kinds: Sequence[str] = ("tiled",)) -> tuple[int, int]:
    """``"128"`` -> (128, 128); ``"128x64"`` -> (128, 64) (queries x keys). A tile given
    where no tiled convention is asked for does nothing: a warning says so."""
    if text is not None and "tiled" not in kinds:
        warn(f"--tile {text} does nothing under --convention {'+'.join(kinds)} (only tiled uses it)")
    if text is None:
        return DEFAULT_TILE
    parts = text.lower().split("x")
    if len(parts) > 2 or any("," in p for p in parts):
        raise CostcalcError(f"--tile: {text!r} is not N or NxM")
    sizes = [int_list(p, "--tile")[0] for p in parts]
    return (sizes[0], sizes[-1])


def mla_form(mla: Union[MlaForm, str], specs: Sequence[ModelSpec]) -> str:
    """--mla, with a warning where no model has MLA layers (it then does nothing)."""
    mla = MlaForm.parse(mla, "--mla").value
    if mla != "auto" and not any(spec.has_mla for spec in specs):
        warn(f"--mla {mla} does nothing: {', '.join(s.name for s in specs)} has no MLA layers")
    return mla


TimingOpt = Annotated[Optional[str], typer.Option(
    "--timing", metavar="MODE", show_default=False,
    help="roofline (the floor: max(FLOPs/peak, bytes/bandwidth) per operator) or measured (each operator's time "
         f"from aiconfigurator's measured kernel tables, beside the floor; {'pip install ' + repr('costcalc[measured]')}).  "
         "(default: roofline)")]
EngineOpt = Annotated[Optional[str], typer.Option(
    "--engine", metavar="ENGINE", show_default=False,
    help="With --timing measured: the engine whose kernels were measured, vllm, trtllm or sglang.  (default: vllm)")]
EngineVersionOpt = Annotated[Optional[str], typer.Option(
    "--engine-version", metavar="V", show_default=False,
    help="With --timing measured: the engine version measured.  (default: the newest in the tables)")]
TIMINGS = ("roofline", "measured")

TRAFFIC_OPTIONS = {   # name: (annotation, default) -- the byte and time options of the workload commands
    "device": (DeviceOpt, None), "device_file": (DeviceFileOpt, None), "weight_dtype": (WeightDtypeOpt, None),
    "kv_dtype": (KvDtypeOpt, None), "act_dtype": (ActDtypeOpt, None), "group_size": (GroupSizeOpt, None),
    "routing": (RoutingOpt, None), "efficiency": (EfficiencyOpt, None), "state_dtype": (StateDtypeOpt, None),
    "index_dtype": (IndexDtypeOpt, None), "timing": (TimingOpt, None), "engine": (EngineOpt, None),
    "engine_version": (EngineVersionOpt, None),
}


def bundled(name: str, options: Mapping[str, tuple[Any, Any]], build):
    """A decorator giving a command the options of ``options`` (name: (annotation, default)),
    declared once, in the place of its parameter ``name``; the command receives
    ``build(**their values)`` as ``name``."""
    import functools
    import inspect

    def decorate(command):
        signature = inspect.signature(command, eval_str=True)
        params = list(signature.parameters.values())
        at = next(i for i, p in enumerate(params) if p.name == name)
        rest = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params if p.name != name]
        added = [inspect.Parameter(key, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)
                 for key, (annotation, default) in options.items()]

        @functools.wraps(command)
        def wrapper(**kwargs):
            kwargs[name] = build(**{key: kwargs.pop(key) for key in options})
            return command(**kwargs)

        wrapper.__signature__ = signature.replace(parameters=rest[:at] + added + rest[at:])
        return wrapper
    return decorate


LAYOUT_OPTIONS = {   # name: (annotation, default) -- the parallel layout of the workload commands (Options' fields)
    "tp": (TpOpt, 1), "ep": (EpOpt, 1), "pp": (PpOpt, 1), "dp": (DpOpt, 1), "sp": (SpOpt, False),
    "micro_batches": (MicroBatchesOpt, None), "overlap": (OverlapOpt, None),
}


def with_layout(command, keep: Sequence[str] = tuple(LAYOUT_OPTIONS)):
    """The layout options (``LAYOUT_OPTIONS``, or those named in ``keep``), received in the
    command's parameter ``layout`` as a dict of ``evaluate.Options`` fields (``overlap`` only where
    given: ``Options``' default otherwise, so a warning can tell it was asked for)."""
    def build(**given):
        return {key: value.value if isinstance(value, Overlap) else value for key, value in given.items()
                if not (key == "overlap" and value is None)}
    return bundled("layout", {key: LAYOUT_OPTIONS[key] for key in keep}, build)(command)


TIMING_OPTIONS = ("timing", "engine", "engine_version")
MEASURED_COMMANDS = ("prefill", "decode", "generate", "chunked", "serve")   # the commands whose rows --timing measured times


def with_traffic(command, keep: Sequence[str] = tuple(TRAFFIC_OPTIONS)):
    """The byte and time options (``TRAFFIC_OPTIONS``, or those named in ``keep``; with --device always
    --timing, --engine and --engine-version), received in the command's parameter ``traffic`` as a
    ``Traffic``. ``--timing measured`` on a command that does not look times up yet is an error."""
    if "device" in keep:
        keep = (*keep, *(k for k in TIMING_OPTIONS if k not in keep))

    def build(**given):
        if (given.get("timing") or "").lower() == "measured" and command.__name__ not in MEASURED_COMMANDS:
            raise CostcalcError(f"--timing measured: {command.__name__} does not look times up in the measured "
                                f"tables yet (prefill, decode, generate and chunked do)")
        return traffic(given)
    return bundled("traffic", {key: TRAFFIC_OPTIONS[key] for key in keep}, build)(command)


def with_some_traffic(*keep: str):
    """``with_traffic`` for a command that takes only some of the options (``keep``)."""
    return lambda command: with_traffic(command, keep)


def window_cache(choice: Union[WindowCache, str], specs: Sequence[ModelSpec], kinds: Sequence[str]) -> str:
    """--window-cache, with a warning where it changes nothing (no window layers, or no
    full convention asked for)."""
    choice = WindowCache.parse(choice, "--window-cache").value
    if choice != "whole":
        if not any(spec.windows for spec in specs):
            warn(f"--window-cache {choice} does nothing: {', '.join(s.name for s in specs)} has no window layers")
        elif "full" not in kinds:
            warn(f"--window-cache {choice} does nothing under --convention {'+'.join(kinds)} (only full uses it)")
    return choice


def traffic(given: Mapping[str, Any]) -> "Traffic":
    """The byte and time options (``TRAFFIC_OPTIONS``, each None where not given) as the
    calculator takes them: no dtypes and no device when none is given (FLOPs only).
    ``group_size`` and ``routing`` not given are 128 and expected; given where they change
    nothing, a warning says so."""
    device, device_file, weight_dtype, kv_dtype, act_dtype, group_size, routing, efficiency, state_dtype, \
        index_dtype, timing, engine, engine_version = (given.get(key) for key in TRAFFIC_OPTIONS)
    timing = "roofline" if timing is None else timing.strip().lower()
    if timing not in TIMINGS:
        raise CostcalcError(f"--timing: {quote(timing)} is not one of {', '.join(TIMINGS)}")
    if engine is not None:      # a bad value is an error even where it would do nothing
        from ..measured import ENGINES

        engine = engine.strip().lower()
        if engine not in ENGINES:
            raise CostcalcError(f"--engine: {quote(engine)} is not one of {', '.join(ENGINES)}")
    if engine_version is not None and not engine_version.strip():
        raise CostcalcError("--engine-version: the version is empty")
    if timing == "measured" and not (device or device_file):
        raise CostcalcError("--timing measured needs --device (the GPU whose kernels were measured)")
    if timing == "roofline":
        for flag, value in (("--engine", engine), ("--engine-version", engine_version)):
            if value is not None:
                warn(f"{flag} does nothing without --timing measured")
    if weight_dtype is not None:
        from ..weights import parse

        weight_dtype = parse(weight_dtype.lower(), "--weight-dtype")   # names in any case (INT4, BF16)
    if group_size is not None and not (weight_dtype is not None and weight_dtype.name in ("int8", "int4")):
        warn("--group-size does nothing without --weight-dtype int8 or int4 (only integer weights carry scales)")
    if routing is not None and not (device or device_file or weight_dtype or kv_dtype or act_dtype or state_dtype
                                      or index_dtype):
        warn("--routing does nothing without --device or a dtype option (it changes bytes, not FLOPs)")
    routing_given = routing is not None
    group_size = 128 if group_size is None else group_size
    routing = Routing.expected if routing is None else routing
    for flag, value in (("--device", device), ("--device-file", device_file)):
        if value is not None and not value.strip():
            raise CostcalcError(f"{flag}: the {'name' if flag == '--device' else 'path'} is empty")
    if efficiency is not None:
        _efficiency(efficiency)            # a bad value is an error even where it would do nothing
    if not (device or device_file or weight_dtype or kv_dtype or act_dtype or state_dtype or index_dtype):
        if efficiency is not None:
            warn("--efficiency does nothing without --device")
        return Traffic()
    from .. import devices
    from ..roofline import Machine, Precision

    if device and device_file:
        raise CostcalcError("give one of --device or --device-file, not both")
    machine = None
    if device or device_file:
        profile = devices.load(device) if device else devices.load_file(device_file)
        measured = None
        if timing == "measured":   # the tables load only here: a roofline answer never imports them
            from ..measured import timing as tables

            measured = tables(profile.name, engine, engine_version)
        machine = Machine(profile, *_efficiency(efficiency), timing=measured)
    elif efficiency is not None:
        warn("--efficiency does nothing without --device")
    dtypes = (weight_dtype, kv_dtype, act_dtype, state_dtype, index_dtype)
    if machine is None and all(d is None for d in dtypes):
        return Traffic()
    if machine is not None and act_dtype is None and "bf16" not in machine.device.peak_flops:
        own = [d for d in machine.device.peak_flops if d in Dtype.__members__]
        if len(own) == 1:   # a measured profile (verify --save-profile) has its run's dtype only
            act_dtype = Dtype(own[0])
            warn(f"device {machine.device.name}'s only peak is {own[0]}: computing in {own[0]} (--act-dtype {own[0]})")
    precision = Precision(weight_dtype, kv_dtype or Dtype.bf16, act_dtype or Dtype.bf16,
                          group_size, routing, state_dtype, index_dtype)
    return Traffic(precision, machine, routing_given, state_dtype is not None, index_dtype is not None)


@dataclass(frozen=True)
class Traffic:
    """The byte and time options as the calculator takes them: dtypes (``precision``) and a
    device (``machine``), both None for FLOPs only; and whether --routing was given (whether
    it does anything depends on the models, which ``for_models`` checks)."""
    precision: Optional["Precision"] = None
    machine: Optional["Machine"] = None
    routing_given: bool = False
    state_given: bool = False
    index_given: bool = False


def for_models(traffic: Traffic, specs: Sequence[ModelSpec]) -> tuple:
    """(precision, machine) for these models; --routing on models without MoE layers warns, as
    --state-dtype on models without recurrent states."""
    if traffic.routing_given and not any(g.block.ffn == "moe" for s in specs for g in s.groups):
        warn(f"--routing does nothing: {', '.join(s.name for s in specs)} has no MoE layers")
    if traffic.state_given and not any(s.has_states for s in specs):
        warn(f"--state-dtype does nothing: {', '.join(s.name for s in specs)} keeps no recurrent state "
             f"(no linear-attention or state-space layers)")
    if traffic.index_given and not any(g.block.indexed for s in specs for g in s.groups):
        warn(f"--index-dtype does nothing: {', '.join(s.name for s in specs)} has no sparse-attention indexer")
    return traffic.precision, traffic.machine


def _efficiency(text: Optional[str]) -> tuple[float, float]:
    if text is None:
        return 1.0, 1.0
    try:
        parts = [float(p) for p in text.split(",")]
    except ValueError:
        raise CostcalcError(f"--efficiency: {text!r} is not C or C,M (fractions like 0.7,0.85)") from None
    if len(parts) not in (1, 2):
        raise CostcalcError(f"--efficiency: {text!r} is not C or C,M")
    from ..roofline import check_efficiency

    return (check_efficiency("compute efficiency", parts[0]), check_efficiency("memory efficiency", parts[-1]))


def warn(message: str) -> None:
    """A one-line warning on stderr: an option that does nothing here, or contradicts another."""
    typer.echo(f"warning: {message}", err=True)


