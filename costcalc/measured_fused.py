"""``--timing measured`` for the kernels that are not one plain GEMM: a MoE layer's routed experts and MLA.

Read from the same aiconfigurator-core tables as ``measured`` (0.12.0, ``systems/data/<system>/<op>/<engine>/
<version>/``; latencies in milliseconds; several kernels measured at one shape: the fastest), with the same
rules: linear between the two nearest measured sizes on the one axis that varies (bilinear in (batch,
length) for attention), the smallest size's time below the measured range and the largest one's scaled in
proportion above it, each named in the row's ``measured_coverage``; the other sizes must match a measured
shape exactly (they are the model's, not the workload's), else the operators keep their floor.

- **Routed experts** (``moe/.../moe_perf.parquet``, written by aiconfigurator's collector
  ``collector/vllm/collect_moe.py`` and its TRT-LLM and SGLang twins): one fused-MoE kernel per layer --
  the gated (SwiGLU) experts' gate-and-up product, the activation and the down product of ``num_tokens``
  tokens each routed to ``topk`` of ``num_experts`` experts of ``hidden_size`` x ``inter_size``, in
  ``moe_dtype``; looked up at ``moe_ep_size`` = 1 by the width one device runs, ``inter_size /
  moe_tp_size`` (the collector's ``local_inter_size``: a tensor-parallel shard's kernel), and the ``balanced``
  distribution: the collector's ``balanced_logits`` sends token t's i-th choice to expert
  ``(t + i ceil(E/k)) mod E``, every expert the same load -- uniform routing, costcalc's ``--routing
  expected`` assumption (its ``power_law_*`` rows model skewed routing, which costcalc does not). Note that
  balanced routing reads min(E, tokens k) distinct experts, ``--routing worst``'s count: at a few tokens
  it reads more experts than uniform routing is expected to, so the estimate errs long, never short.
  Linear in ``num_tokens`` (27 measured, 1 to 16384) at the model's exact (hidden, inter, topk, E, dtype).
- **DeepSeek-V3.2's sparse MLA** (DSA: DeepSeek-V3's MLA and a lightning indexer of 64 heads of 128 choosing
  2048 keys): under vLLM only, its whole attention module (``sparse_attention/vllm/.../dsa_{context,generation}
  _module_perf.parquet``, the same collector with the indexer), DeepSeek-V3.2's rows, as the MLA module below;
  it stands for the indexer's projections and scores too.
- **MLA of DeepSeek-V3's shape** (d 7168, query LoRA 1536, KV latent 512, 128 + 64 query/key head
  dims, 128 value dims; any measured head count): vLLM's tables (``mla/vllm/.../mla_{context,generation}
  _module_perf.parquet``, collector ``collector/vllm/collect_mla_module.py``) time the whole
  ``DeepseekV2MLAAttention`` forward -- every projection, the norms, RoPE, the attention and o_proj -- at
  ``batch_size`` and ``isl`` (context: an uncached prompt, naive MLA) or ``step`` (generation: the keys a
  step reads, its own included; absorbed MLA), per ``gemm_type`` (the projections' format) and
  ``kv_cache_dtype``: the module's time stands for all those operators together. TensorRT-LLM's and
  SGLang's (``context_mla_perf``, ``generation_mla_perf``) time the attention kernel alone (generation:
  ``isl + step`` keys, as for GQA), and ``mla_bmm/.../mla_bmm_perf.parquet`` the absorbed decode's
  per-head products (``mla_gen_pre`` = ``q_absorb``, ``mla_gen_post`` = ``v_absorb``) at ``num_tokens``
  and ``num_heads``; the other projections are plain GEMMs (``measured.Timing.gemm``), as aiconfigurator's
  own granular DeepSeek model builds them (``sdk/models/deepseek.py``).

- **Gated DeltaNet** (Qwen3-Next, Qwen3.5; ``linear_attention/.../gdn_perf.parquet``, collector
  ``collector/vllm/collect_gdn.py`` and its twins): the scan (``*gated_delta_rule*`` kernels: chunked over a
  prompt, the recurrent step in a decode step) and the short convolution (``causal_conv1d_fn`` over a prompt,
  ``causal_conv1d_update`` a step), each its own row, at the layer's exact key heads, key head dim, value
  heads, value head dim and taps (``d_model`` does not enter these kernels: the fastest row over it); an
  uncached prefill bilinear in (batch, prompt length), a decode step linear in the batch. The collectors
  keep the state as the engine serves it (vLLM 0.24.0: bf16; SGLang 0.5.14: fp32), which may be narrower than
  a preset's ``state_dtype``: the estimate is then raised to costcalc's floor. TensorRT-LLM's collector
  (``collector/trtllm/collect_gdn.py``) convolves the key channels only, not the layer's packed q, k and v:
  its convolution rows are not looked up (the scan's are).

A lookup that covers several operators (the fused MoE kernel; vLLM's MLA module) is shared among them in
proportion to their floors (``roofline.point``), so each is raised to its floor exactly where the whole is.
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Optional

from .measured import GEMM_DTYPES, KV_DTYPES, Timing, _bilinear, _linear, _runs

MOE_DISTRIBUTION = "balanced"   # uniform routing: costcalc's --routing expected (see the docstring)
MOE_OPS = ("experts.gate_proj", "experts.up_proj", "experts.down_proj")   # one fused kernel
PLAIN_MOE_OPS = ("experts.up_proj", "experts.down_proj")                    # non-gated experts (Nemotron-H)
# The tables have no gating column: the rows at these (hidden, inter, topk, experts) are Nemotron-H's
# non-gated (relu^2) experts, up and down only -- collector/cases/models/NemotronHForCausalLM_cases.yaml lists
# Nemotron-3 Nano (2688, 1856, 6, 128), Super (4096, 2688, 22, 512) and Ultra (8192, 5120, 22, 512); the
# other two top-22-of-512 rows (hidden 1024 and 2048) match no listed model and are taken to be Super's and
# Ultra's latent MoE widths (unconfirmed; their latencies fit two matrices, not three, docs/cost-model.md).
# Every other shape is a gated (SwiGLU) model's.
NON_GATED = frozenset({(2688, 1856, 6, 128), (4096, 2688, 22, 512), (8192, 5120, 22, 512), (1024, 2688, 22, 512),
                       (2048, 5120, 22, 512)})
# DeepSeek-V3's MLA, the one shape the MLA tables measured (only the head count varies)
MLA_SHAPE = {"d": 7168, "r_q": 1536, "r_kv": 512, "d_nope": 128, "d_rope": 64, "d_v": 128}
MLA_MODULE_OPS = ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "q_absorb", "v_absorb", "o_proj",
                  "attention")
MLA_FORMS = {"context": "naive", "generation": "absorbed"}   # the form each phase's kernels run
# DeepSeek-V3.2's sparse MLA (DSA): DeepSeek-V3's MLA and its lightning indexer, the one DSA shape measured by
# vLLM's DSA module tables (rows of other models, GLM-5's, are left out)
DSA_SHAPE = {**MLA_SHAPE, "h_I": 64, "d_I": 128, "k_I": 2048}
DSA_MODEL = "deepseek-ai/DeepSeek-V3.2"
INDEXER_OPS = ("indexer.wq_b", "indexer.wk", "indexer.weights_proj", "indexer")
BMM_OPS = {"q_absorb": "mla_gen_pre", "v_absorb": "mla_gen_post"}


def _folder(timing: Timing, op: str) -> Path:
    return timing.root / timing.system / op / timing.engine / timing.version


def moe(timing: Timing, tokens: int, shape: tuple, dtype: str, gated: bool = True) -> tuple[Optional[float], str]:
    """Seconds of one fused-MoE layer routing ``tokens`` tokens, ``shape`` = (hidden, expert width, top-k,
    experts), weights in ``dtype``, gated (SwiGLU) experts or not (``NON_GATED``); None (and why) where the
    tables hold no such shape."""
    path = _folder(timing, "moe") / "moe_perf.parquet"
    if not path.is_file():
        return None, f"no MoE table for {timing.engine} {timing.version}"
    key = (GEMM_DTYPES.get(dtype, ""), *shape, gated)
    table = _moe_table(path)
    if key not in table:
        hidden, inter, topk, experts = shape
        return None, f"no {'gated' if gated else 'non-gated'} fused MoE measured for hidden {hidden}, expert " \
                     f"width {inter}, top-{topk} of {experts}, {dtype}"
    return _linear(*table[key], tokens, "tokens")


def mla_shape(sizes: dict, sparse: bool = False) -> bool:
    """Whether a layer's MLA has the one shape the MLA tables measured (DeepSeek-V3's; with ``sparse``,
    DeepSeek-V3.2's, its indexer included)."""
    return all(sizes.get(k) == v for k, v in (DSA_SHAPE if sparse else MLA_SHAPE).items())


def mla_module(timing: Timing, phase: str, batch: int, length: int, heads: int, kv_dtype: str,
               gemm_dtype: str, sparse: bool = False) -> tuple[Optional[float], str]:
    """vLLM's whole MLA attention module of one layer (with ``sparse``, DeepSeek-V3.2's DSA module, its
    indexer included): ``phase`` context (``length`` = the prompt) or generation (``length`` = the keys
    read); None (and why) where no table holds it."""
    name = "DSA" if sparse else "MLA"
    path = _folder(timing, "sparse_attention" if sparse else "mla") / f"{name.lower()}_{phase}_module_perf.parquet"
    if not path.is_file():
        return None, f"no {phase} {name} module table"
    table = _mla_table(path, "gemm_type", DSA_MODEL if sparse else None)
    key = (KV_DTYPES.get(kv_dtype, ""), GEMM_DTYPES.get(gemm_dtype, ""), heads)
    if key not in table:
        return None, f"no {phase} {name} module measured for {heads} heads, KV {kv_dtype}, projections {gemm_dtype}"
    return _bilinear(table[key], batch, length, ("batch", "keys" if phase == "generation" else "seq"))


def mla_attention(timing: Timing, phase: str, batch: int, length: int, heads: int,
                  kv_dtype: str) -> tuple[Optional[float], str]:
    """The MLA attention kernel alone of one layer (TensorRT-LLM's and SGLang's tables)."""
    path = _folder(timing, "mla") / f"{phase}_mla_perf.parquet"
    if not path.is_file():
        return None, f"no {phase} MLA kernel table"
    table = _mla_table(path, None)
    key = (KV_DTYPES.get(kv_dtype, ""), None, heads)
    if key not in table:
        return None, f"no {phase} MLA measured for {heads} heads, KV {kv_dtype}"
    return _bilinear(table[key], batch, length, ("batch", "keys" if phase == "generation" else "seq"))


def mla_bmm(timing: Timing, op: str, tokens: int, heads: int, dtype: str) -> tuple[Optional[float], str]:
    """One layer's absorbed per-head product (``q_absorb`` or ``v_absorb``) over ``tokens`` tokens, in the
    weights' format where the engine measured it (fp8), else bf16 (an engine that runs these products in
    bf16 only, as vLLM 0.24.0)."""
    path = _folder(timing, "mla_bmm") / "mla_bmm_perf.parquet"
    if not path.is_file():
        return None, "no MLA bmm table"
    table = _bmm_table(path)
    want = GEMM_DTYPES.get(dtype, "")
    have = {k[1] for k in table}
    bmm = "fp8" if want.startswith("fp8") and "fp8" in have else "bfloat16"
    key = (BMM_OPS[op], bmm, heads)
    if key not in table:
        return None, f"no MLA {BMM_OPS[op]} bmm measured for {heads} heads"
    return _linear(*table[key], tokens, "tokens")


GDN_KERNELS = {"scan": "gated_delta_rule", "conv": "causal_conv1d"}   # costcalc's operator -> kernel names
GDN_KEYS_ONLY_CONV = ("trtllm",)   # engines whose collector convolves h_k d_k channels, not 2 h_k d_k + h_v d_v


def gdn(timing: Timing, op: str, phase: str, batch: int, length: int, shape: tuple) -> tuple[Optional[float], str]:
    """One Gated DeltaNet layer's scan or convolution (``op``): ``phase`` context (``length`` = the prompt)
    or generation (one token a sequence), ``shape`` = (key heads, key head dim, value heads, value head dim,
    taps); None (and why) where no table holds it."""
    path = _folder(timing, "linear_attention") / "gdn_perf.parquet"
    if not path.is_file():
        return None, "no Gated DeltaNet table"
    if op == "conv" and timing.engine in GDN_KEYS_ONLY_CONV:
        return None, f"{timing.engine}'s Gated DeltaNet convolution was measured over the keys only"
    table = _gdn_table(path)
    key = (phase, op, *shape)
    if key not in table:
        hk, dk, hv, dv, taps = shape
        return None, f"no {phase} Gated DeltaNet {op} measured for {hk} key heads of {dk}, {hv} value heads " \
                     f"of {dv}, {taps} taps"
    return _bilinear(table[key], batch, length, ("batch", "seq"))


# --- the tables --------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _moe_table(path: Path) -> dict:
    """(moe dtype, hidden, the width one device runs, topk, experts, gated) -> (sorted token counts, seconds):
    no expert parallelism (ep = 1), the width ``inter_size / moe_tp_size``, gated unless the model's shape is
    ``NON_GATED``, balanced routing, the fastest kernel where several were measured at one such key."""
    import pandas as pd

    frame = pd.read_parquet(path, columns=["moe_dtype", "num_tokens", "hidden_size", "inter_size", "topk",
                                           "num_experts", "moe_tp_size", "moe_ep_size", "distribution", "latency"])
    frame = frame[(frame.moe_ep_size == 1) & (frame.distribution == MOE_DISTRIBUTION)]
    shapes = zip(frame.hidden_size, frame.inter_size, frame.topk, frame.num_experts)
    frame = frame.assign(local=frame.inter_size // frame.moe_tp_size,
                         gated=[tuple(int(x) for x in shape) not in NON_GATED for shape in shapes])
    keys = ["moe_dtype", "hidden_size", "local", "topk", "num_experts", "gated"]
    frame = frame.groupby([*keys, "num_tokens"], as_index=False, sort=True)["latency"].min()
    return {(dtype, int(h), int(i), int(k), int(e), bool(g)): (xs, lat)
            for (dtype, h, i, k, e, g), xs, lat in _runs(frame, keys, "num_tokens")}


@functools.lru_cache(maxsize=None)
def _mla_table(path: Path, gemm: Optional[str], model: Optional[str] = None) -> dict:
    """(kv dtype, gemm type or None, heads) -> {batch: (sorted lengths, seconds)}, bf16 attention compute,
    ``model``'s rows only where given; the length is the prompt (context: uncached, ``step`` 0), the keys a
    step reads (generation: ``step`` in a module table, which counts the step's own token, ``isl + step`` in a
    kernel table, as for GQA)."""
    import pandas as pd

    frame = pd.read_parquet(path)
    frame = frame[frame.mla_dtype == "bfloat16"]
    if model is not None:
        frame = frame[frame.model == model]
    if "context" in path.name:
        frame = frame[frame.step == 0]
    generation = "generation" in path.name
    module = "module" in path.name
    length = frame["step"] if generation and module else frame["isl"] + (frame["step"] if generation else 0)
    frame = frame.assign(length=length, gemm=frame[gemm] if gemm else "")
    keys = ["kv_cache_dtype", "gemm", "num_heads", "batch_size"]
    frame = frame.groupby([*keys, "length"], as_index=False, sort=True)["latency"].min()
    out: dict = {}
    for (kv, g, h, b), lengths, lat in _runs(frame, keys, "length"):
        out.setdefault((kv, g or None, int(h)), {})[int(b)] = (lengths, lat)
    return out


@functools.lru_cache(maxsize=None)
def _bmm_table(path: Path) -> dict:
    """(op name, bmm dtype, heads) -> (sorted token counts, seconds)."""
    import pandas as pd

    frame = pd.read_parquet(path, columns=["op_name", "bmm_dtype", "num_heads", "num_tokens", "latency"])
    keys = ["op_name", "bmm_dtype", "num_heads"]
    frame = frame.groupby([*keys, "num_tokens"], as_index=False, sort=True)["latency"].min()
    return {(op, dtype, int(h)): (xs, lat) for (op, dtype, h), xs, lat in _runs(frame, keys, "num_tokens")}


@functools.lru_cache(maxsize=None)
def _gdn_table(path: Path) -> dict:
    """(phase, scan or conv, key heads, key dim, value heads, value dim, taps) -> {batch: (sorted lengths,
    seconds)}: the prompt length (context) or 1 (generation), the fastest row over ``d_model``."""
    import pandas as pd

    frame = pd.read_parquet(path, columns=["kernel_source", "phase", "batch_size", "seq_len", "d_conv", "num_k_heads",
                                           "head_k_dim", "num_v_heads", "head_v_dim", "latency"])
    op = pd.Series("", index=frame.index)
    for name, kernel in GDN_KERNELS.items():
        op = op.mask(frame.kernel_source.str.contains(kernel), name)
    frame = frame.assign(op=op, length=frame["seq_len"].where(frame.phase == "context", 1))
    frame = frame[frame.op != ""]
    keys = ["phase", "op", "num_k_heads", "head_k_dim", "num_v_heads", "head_v_dim", "d_conv", "batch_size"]
    frame = frame.groupby([*keys, "length"], as_index=False, sort=True)["latency"].min()
    out: dict = {}
    for (phase, op, hk, dk, hv, dv, taps, b), lengths, lat in _runs(frame, keys, "length"):
        out.setdefault((phase, op, int(hk), int(dk), int(hv), int(dv), int(taps)), {})[int(b)] = (lengths, lat)
    return out
