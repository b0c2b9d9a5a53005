"""Building a decoder: from a costcalc preset (random weights) or the seed toy (its exact weights)."""
from __future__ import annotations

import random

import torch

from costcalc.errors import CostcalcError
from .model import Decoder, DecoderConfig

DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16,
          "float16": torch.float16}


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name not in ("cpu", "cuda"):
        raise CostcalcError(f"unknown device {name!r}; expected auto, cpu or cuda")
    if name == "cuda" and not torch.cuda.is_available():
        raise CostcalcError("device cuda asked for, but torch sees no CUDA device")
    return torch.device(name)


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    if name not in DTYPES:
        raise CostcalcError(f"unknown dtype {name!r}; expected one of {', '.join(DTYPES)}")
    dtype = DTYPES[name]
    try:  # can the device multiply in this dtype at all?
        a = torch.ones(2, 2, dtype=dtype, device=device)
        (a @ a).sum().item()
    except (RuntimeError, TypeError) as exc:
        raise CostcalcError(f"dtype {name} does not run on {device.type}: {str(exc).splitlines()[0]}") from None
    return dtype


def from_spec(spec, layers: int | None = None, vocab: int | None = None, dtype=torch.float32,
              device="cpu", seed: int = 0) -> Decoder:
    """A decoder with the preset's shapes (``layers``/``vocab`` overrides only where asked)."""
    overrides = {}
    if layers is not None:
        overrides["L"] = layers
    if vocab is not None:
        overrides["V"] = vocab
    config = DecoderConfig.from_spec(spec, **overrides)
    check_memory(parameter_bytes(spec.with_sizes(**overrides) if overrides else spec, dtype), torch.device(device))
    with torch.device("meta"):
        model = Decoder(config).to(dtype)
    model = model.to_empty(device=device)
    # Uniform with standard deviation 0.02, drawn in place on the device: the values only have
    # to be finite and varied (routing, logits); uniform_ is ~3x cheaper than normal_ on CPU,
    # which matters for the 1.5B parameters of an 8B-class embedding + LM head.
    gen = torch.Generator(device=device).manual_seed(seed)
    bound = 0.02 * 3 ** 0.5
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.uniform_(-bound, bound, generator=gen)
    return model.eval()


def twin(model: Decoder) -> Decoder:
    """A second decoder instance that shares ``model``'s weights (no copy): timing runs on it,
    so the timed module has never run under the FLOP counter, without doubling memory."""
    with torch.device("meta"):
        other = Decoder(model.c)
    other.load_state_dict(model.state_dict(), assign=True)
    return other.eval()


def parameter_bytes(spec, dtype: torch.dtype) -> int:
    """Bytes of the decoder's weights: the costcalc count, with an LM head of its own."""
    from costcalc.calc import parameters

    params = parameters(spec)
    count = params["block_params"] + params["embedding_params"] + params["lm_head_params"]
    return count * torch.empty((), dtype=dtype).element_size()


def memory_need(spec, jobs, dtype: torch.dtype, device: torch.device, positions: int = 0,
                attention_lengths=()) -> tuple[int, int, str]:
    """Bytes a run needs at its peak, estimated from sizes alone (before anything is built):
    (weights, the largest job, that job's name). Weights (and a position table of
    ``positions`` rows); for each job its KV cache plus, for its largest forward pass, the
    masks (and what the attention recorder derives from them), the activations of one layer,
    the repeated K/V heads, the logits, and the score matrices where attention falls back to
    materialising them (MLA: score and value widths differ)."""
    elem = torch.empty((), dtype=dtype).element_size()
    weights = parameter_bytes(spec, dtype) + positions * spec["d"] * elem
    per_token = sum(g.count * _cache_width(g) for g in spec.groups) * elem
    worst, label = 0, ""
    for job in jobs:
        peak = max((_pass_bytes(spec, b, c, k, elem, device) for b, c, k in job.passes), default=0)
        need = job.batch * job.cache * per_token + peak
        if need > worst:
            worst, label = need, f"{job.workload} {job.detail}"
    for n in attention_lengths:   # q (used as k and v too) and the output, per length
        need = 2 * max(g.sizes.get("h_q", 1) * g.sizes.get("d_h", 1) for g in spec.groups) * n * max(elem, 4)
        if need > worst:
            worst, label = need, f"attention timing S={n}"
    return weights, worst, label


def _cache_width(group) -> int:
    """Cached numbers per token of one layer: K and V, or MLA's decompressed K, V and latent
    (none for a layer without attention: a mixer's state does not grow with the tokens)."""
    z = group.sizes
    if not group.block.attends:
        return 0
    if group.block.attention == "mla":
        return z["h_q"] * (z["d_nope"] + z["d_rope"] + z["d_v"]) + z["r_kv"] + z["d_rope"]
    return 2 * z["h_kv"] * z["d_h"]


def _pass_bytes(spec, b: int, c: int, k: int, elem: int, device: torch.device) -> int:
    """Transient bytes of one forward of ``c`` queries over ``k`` keys at batch ``b``."""
    masks = c * k * (4 + elem)        # bool mask, window band, recorder's copies; a float bias in SDPA
    layer = 0
    for g in spec.groups:
        z = g.sizes
        if g.block.attention == "mla":
            heads, width = z["h_q"], z["d_nope"] + z["d_rope"] + z["d_v"] + z["r_kv"]
            scores = 3 * b * heads * c * k       # math path: scores, softmax, weights
        elif g.block.attends:
            heads, width = z["h_q"], 2 * z["d_h"]
            scores = 0
        else:
            heads, width, scores = 0, 0, 0
        repeated = b * heads * k * width     # K and V repeated to every query head (or decompressed)
        repeated += _mixer_bytes(g.block.mixer, z, b, c)
        if g.block.ffn == "none":
            ffn = 0
        elif g.block.ffn in ("dense", "mlp"):
            ffn = 3 * b * c * z["m"]
        else:
            ffn = b * c * (z["E"] + 3 * z["k"] * z["m_e"] + 3 * z.get("E_s", 0) * (z.get("m_s") or 0))
        layer = max(layer, repeated + scores + ffn)
    hidden = 6 * b * c * spec["d"]          # residual stream, norms, projections in and out
    logits = b * spec["V"]
    return masks + (layer + hidden + logits) * elem


def _mixer_bytes(mixer: str, z: dict, b: int, c: int) -> int:
    """Numbers a mixer's chunked scan holds at once for ``c`` tokens, both forms (a bound): its
    inputs, the chunks' Q_c x Q_c scores (KDA's per key channel) and the states between chunks."""
    if not mixer:
        return 0
    q = z.get("Q_c", 1)
    padded = -(-c // q) * q + q
    heads, width, state = {"gdn": (z.get("h_lv"), z.get("d_lv"), z.get("d_lk", 0) * z.get("d_lv", 0)),
                           "kda": (z.get("h_lv"), z.get("d_lv"), z.get("d_lk", 0) * z.get("d_lv", 0)),
                           "mamba2": (z.get("h_m"), z.get("d_m"), z.get("d_m", 0) * z.get("N_s", 0)),
                           "mamba1": (1, z.get("d_in"), z.get("d_in", 0) * z.get("N_s", 0)),
                           "lightning": (z.get("h_q"), z.get("d_h"), z.get("d_h", 0) ** 2),
                           "shortconv": (1, z.get("d"), 0)}[mixer]
    scores = padded * q * (z.get("d_lk", 1) if mixer == "kda" else 1)
    states = (padded // q + 1) * state
    return 4 * b * (padded * z.get("d", 0) + heads * (scores + states + 4 * padded * width))


def check_memory(need: int, device: torch.device, detail: str = "") -> None:
    """``need`` bytes against what the device has free (80% of it, at most)."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
    else:
        free = _available_ram()
    if free and need > 0.8 * free:
        what = f"the run needs {need / 2**30:.1f} GiB ({detail})" if detail else \
            f"the model needs {need / 2**30:.1f} GiB of weights"
        raise CostcalcError(f"{what} but {device.type} has {free / 2**30:.1f} GiB free; "
                            f"use --layers, --vocab or shorter --seq")


def _available_ram() -> int:
    return meminfo("MemAvailable")


def meminfo(field: str) -> int:
    """Bytes of a /proc/meminfo field (``MemAvailable``, ``MemTotal``); 0 where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


PUBLISHED_POSITIONS = 64      # rows of the seed tutorial's position table
EXTRA_POSITIONS_SEED = 8      # rows past those: a generator of their own, after the published draws


def toy(dtype=torch.float64, device="cpu", positions: int = PUBLISHED_POSITIONS) -> Decoder:
    """The seed tutorial's decoder with its exact weights: ``random.Random(7)``,
    ``uniform(-0.2, 0.2)``, drawn row by row in the order embedding, position table,
    then per block q, k, v, out, gate, up, down, then lm_head (each as [in][out]).

    The published table has 64 rows. Longer runs need more: rows 64, 65, ... come from
    ``random.Random(8)`` (same distribution), drawn after every published weight, so the
    published weights -- and the tutorial's table -- stay exactly as they were."""
    rows = max(positions, PUBLISHED_POSITIONS)
    config = DecoderConfig.uniform(L=2, d=8, V=6, h_q=2, h_kv=1, d_h=4, m=16, positions="table",
                                   max_positions=rows, norm_scale=False, norm_eps=1e-6)
    model = Decoder(config)
    rng = random.Random(7)

    def draw(rows: int, cols: int, rng=rng) -> torch.Tensor:
        return torch.tensor([[rng.uniform(-0.2, 0.2) for _ in range(cols)] for _ in range(rows)],
                            dtype=torch.float64)

    with torch.no_grad():
        model.embed.weight.copy_(draw(config.V, config.d))
        model.position.weight[:PUBLISHED_POSITIONS].copy_(draw(PUBLISHED_POSITIONS, config.d))
        for block in model.layers:
            a, f = block.attn, block.ffn
            for linear, (rows_, cols) in ((a.q_proj, (8, 8)), (a.k_proj, (8, 4)), (a.v_proj, (8, 4)),
                                          (a.o_proj, (8, 8)), (f.gate_proj, (8, 16)),
                                          (f.up_proj, (8, 16)), (f.down_proj, (16, 8))):
                linear.weight.copy_(draw(rows_, cols).T)   # nn.Linear stores [out, in]
        model.lm_head.weight.copy_(draw(config.d, config.V).T)
        if rows > PUBLISHED_POSITIONS:
            extra = random.Random(EXTRA_POSITIONS_SEED)
            model.position.weight[PUBLISHED_POSITIONS:].copy_(draw(rows - PUBLISHED_POSITIONS, config.d, extra))
    return model.to(dtype=dtype, device=device).eval()
