"""The conventions every printed number is labelled with, written once."""
from __future__ import annotations

COUNTED = ("FLOPs = 2 x multiply-adds, matrix products only: block linear layers, "
           "attention QK^T and AV, LM head.")
NOT_COUNTED = ("Not counted: embedding lookup, norms, softmax, RoPE, activations, "
               "router top-k selection, sampling, bias adds, data movement.")
CONVENTIONS = {
    "causal": "causal = legal query-key pairs only (future keys skipped: the ideal effective work)",
    "full": "full = the whole score rectangle the shapes imply (dense masked matmul, torch's SDPA counter)",
    "tiled": "tiled = the query x key tiles a block-skipping kernel visits (tiles aligned at key 0; see the tile column)",
}
LOGITS = {
    "last": "logits last = LM head on each sequence's last position",
    "all": "logits all = LM head on every position",
}
CROSSOVER = ("FLOPs crossovers for one sequence, LM head excluded -- not time: attention can "
             "dominate latency much earlier through KV-cache bandwidth. decode_t_equal = keys "
             "read per decode step (the step's own key included) at which attention equals linear "
             "FLOPs (exact, tokens); context = the cached tokens before that step, keys - 1, what "
             "'decode --context' takes. Summed over layer groups (a linear-attention or state-space layer adds its "
             "linear layers, no attention; a sparse-attention layer's attention counts its indexer's scores, which grow "
             "with the keys while its top-k caps the rest); never = sliding windows or attention chunks keep "
             "attention below the linear layers at every length, or no layer has softmax attention.")
SCAN = ("scan (linear attention, state-space mixers): recurrent = each new token updates and reads the fixed-size "
        "state once (the ideal work; under causal); chunked = the chunked algorithm transformers' torch path runs, "
        "as its matrix products count (under full and tiled): whole chunks of Q_c with the last one padded, a "
        "single-token step over a cache counting only its matrix products (none for Gated DeltaNet and KDA). "
        "conv = the short depthwise convolution: one output per new token (recurrent) or the padded outputs "
        "transformers computes (chunked). Not counted: the triangular solves and elementwise decays and gates.")
TRAIN = ("train = forward with logits at every position x 3 (forward + backward); "
         "rule_6p = 6 x (P_lin + d V) x tokens. Attention and the LM head are why they differ.")


def footer(conventions: set[str], logits: set[str], columns: set[str] = frozenset()) -> list[str]:
    """The notes a table of these columns needs: what the FLOPs count, the conventions, and
    what bytes, time and a generation's rates mean where they appear."""
    lines = [COUNTED, NOT_COUNTED]
    lines += [CONVENTIONS[c] for c in sorted(conventions) if c in CONVENTIONS]
    if "scan" in columns or "scan_flops" in columns:
        lines.append(SCAN)
    v4 = "hyper" in columns or "hyper_flops" in columns        # DeepSeek-V4's layers
    if ("indexer" in columns or "indexer_flops" in columns) and not v4:
        lines.append(INDEXER)
    if v4:
        lines.append(V4)
    lines += [LOGITS[x] for x in sorted(logits) if x in LOGITS]
    if any(c.endswith("_bytes") for c in columns):
        lines.append(TRAFFIC)
    if "state_read_bytes" in columns:
        lines.append(STATE_TRAFFIC)
    if "routing" in columns:
        lines.append(ROUTING)
    if "comm_bytes_per_device" in columns:
        lines.append(COLLECTIVES)
    if "ttft_s" in columns:
        lines.append(RATES)
    elif "tokens_per_s" in columns:
        lines.append(STEP_RATES)
    if "fits" in columns:
        lines.append(FITS)
    if "compute_efficiency" in columns:
        lines.append(EFFICIENCY)
    if "floor_time_s" in columns:
        lines.append(MEASURED)
    if "comm_floor_time_s" in columns:
        lines.append(MEASURED_COMM)
    if ("draft" in columns or "draft_flops" in columns) and "expected_tokens_per_step" not in columns:
        lines.append(DRAFT)       # a speculative row's draft: the command's own note (SPECULATION)
    return lines
TIMING = ("timings: tflops_per_s_causal and tflops_per_s_full divide the causal and the full FLOPs "
          "count by the measured time; tflops_per_s and peak_fraction use the causal count (the work the "
          "model needs), peak_fraction against the GEMM peak measured in the same run.")
V4 = ("DeepSeek-V4: attention reads a window and compressed entries, one per R_c tokens (causal: min(p, W) "
      "and floor(p / R_c), at most k_I in a compressed sparse layer; full: what transformers multiplies, the "
      "window cache of W - 1 plus the new tokens and every entry); indexer = its scores over compressed index "
      "keys, 2 h_I d_I a pair (causal: floor(p / R_c) a query; full: every entry); hyper = the hyper-connections' "
      "fn projections and comb mixes; hc_head = the hyper-connection head, once per model.")
INDEXER = ("indexer = DeepSeek sparse attention's lightning indexer scores, 2 h_I (d_I + 1) per query-key pair it "
           "scores (causal: every legal key; full: the rectangle); attention then reads min(p, k_I) keys a query "
           "under causal, every key under full; indexer_proj = its projections (wq_b, wk, weights_proj).")
SPARSE_CROSSOVER = ("sparse_decode_cheaper = keys read by a causal decode step (exact, tokens; context = keys - 1) "
                    "past which the model with DeepSeek sparse attention costs fewer FLOPs in all than the same "
                    "model with every sparse layer dense (no indexer, every key read); first_cheaper_context = the "
                    "smallest whole context at which the sparse step is strictly cheaper.")
TIME_CROSSOVER = ("t_equal_time = keys read by a decode step of the given batch at which reading the K/V cache "
                  "moves as many bytes as reading the weights (LM head included): where a memory-bound step's "
                  "time turns from weights to cache. t_equal = the FLOPs crossover, beside it.")
TRAFFIC = ("bytes = weights read once per forward (a routed expert once per expert touched; each matrix in its "
           "weight format, weight_dtype, with the scales and zero points it stores; generic int8/int4 with an fp16 "
           "scale per group), activations in and out of each matmul, K/V loaded by a fused attention "
           "kernel and written for new tokens (an integer KV cache without scales); time = sum over operators of "
           "max(FLOPs / peak, bytes / bandwidth), dense peaks -- a roofline floor. GB = 10^9 bytes (token counts "
           "use k = 1024).")
STATE_TRAFFIC = ("state_read, state_write = a linear-attention or state-space layer's recurrent state (state_dtype), "
                 "read once per forward over a cache and written once, whatever the context; its convolution window "
                 "moves with the K/V (kv_read, kv_write).")
COLLECTIVES = ("comm_bytes_per_device = the sum over a device's collectives of count x message size S (nccl-tests' "
               "size: the buffer an all-reduce reduces, an all-gather's output), not the bytes on the wire: a ring "
               "moves factor(n) x S each way (all-reduce 2(n-1)/n, the others (n-1)/n); comm time = alpha + "
               "factor(n) x S / the link's bandwidth each way (docs/cost-model.md, Tensor and expert parallelism).")
ROUTING = ("routing expected: a MoE layer reads the weights of E (1 - (1 - k/E)^n) distinct experts for n routed "
           "tokens (uniform top-k routing), a rational count -- bytes are rounded to the whole byte; worst: "
           "min(E, n k).")
RATES = ("ttft = time to first token (the prefill); tpot = time per output token (the N-1 decode steps / "
         "(N-1)); tok/s/seq = N / (prefill + decode time), per sequence; tok/s = the batch's B x N over the same.")
STEP_RATES = ("tok/s/seq = 1 / the decode step's time (one token per sequence); tok/s = the batch's B / the same.")
FITS = ("fits = the weights and the KV cache the row holds after its step (its batch x the context then: prefill S, "
        "decode T+1, a chunk its prefix + chunk, a generation's decode phase S+N-1; a rolling window cache) within 90% "
        "of the device's memory, as 'costcalc memory' counts them (per device under a layout).")
COMPUTE_BOUND = ("compute_bound = compute_bound_batch: the first whole batch at which a decode step over "
                 "compute_bound_context cached tokens (--context, else T_equal's context) is compute-bound, its "
                 "FLOPs / peak past its bytes / bandwidth (exact: compute_bound_batch_exact, the rational batch where "
                 "they are equal; per term <term>_compute_bound_batch; never: memory-bound at every batch).")
MEASURED = ("timing measured: time = each operator's latency at its shape in aiconfigurator-core's measured kernel "
            "tables for this device and engine version (plain GEMMs, GQA attention, fused MoE experts, DeepSeek-V3-"
            "shaped MLA and DSA, Gated DeltaNet; the rest at its roofline "
            "time, and shapes outside the tables, named in measured_coverage); floor = the roofline time above; "
            "efficiency = floor / time (docs/cost-model.md, Measured time).")
MEASURED_COMM = ("timing measured on a layout: each device's operators are looked up at its shard's shapes and "
                 "each collective in the tables measured inside one node (all-reduce: the engine's own; the rest: "
                 "NCCL's) at its ranks and message, comm_time_s; comm_floor_time_s = the roofline's alpha-beta time, "
                 "kept where no table holds a collective or its group spans nodes, and where the table is under it "
                 "(each named in measured_coverage); --overlap meets them as for the floor.")
EFFICIENCY = ("compute_efficiency, memory_efficiency: the fractions of the device's peak FLOP/s and bandwidth "
              "the times assume (--efficiency).")
STATE = ("state_bytes: each linear-attention or state-space layer keeps, per sequence and whatever the context, "
         "its recurrent state (in state_dtype) and its convolution window (K_c - 1 positions; in the KV dtype); "
         "only softmax-attention layers have a KV cache that grows with the context.")
MEMORY = ("Resident weights: every matrix (all experts, embedding, an untied LM head) in its weight format "
          "(weight_dtype: the model's shipped formats, or --weight-dtype for every module; weight_dtype_source says "
          "which), scales and zero points included. KV "
          "cache: per layer group the tokens its cache keeps (a sliding-window layer at most W, a chunked one "
          "W_c, as serving caches keep them; every token with --window-cache whole) x K/V width (MLA absorbed: latent + RoPE key) x "
          "batch, in the KV dtype. fits leaves --reserve of the device free; max_context is what memory allows, not "
          "the model's trained context length. fits_on: the smallest layout whose every device fits (fewest devices "
          "tp x pp, tp up to the device's scale-up domain; at equal counts the most tp, then ep 1 before ep = tp; "
          "no dp), blank if none does.")
MEMORY_LAYOUT = ("Per device: the largest device's (the stage that decides the fit): its TP shards (heads, widths, "
                 "vocabulary-parallel embedding and LM head; what has no split size, such as the router or MLA's "
                 "down-projections, whole), E/ep routed experts, its stage's layers (the first holds the "
                 "embedding, the last the LM head: tied, a copy), and their cache for its replica's B/D sequences "
                 "(h_kv/tp KV heads, one replicated head a device where h_kv < tp; MLA's latent whole on every "
                 "rank, as vLLM keeps it); max_batch is the whole layout's (per replica x dp).")
FITS_ON_LINES = 8   # a table's notes say what fits, one line a row, for at most this many distinct answers
DRAFT = ("draft = the model's multi-token-prediction module run once each decode step (--draft mtp): eh_proj, its "
         "decoder block over its own KV cache and the LM head for one draft token, beside the step's own FLOPs; "
         "per_token and the rates still count one token a step (--acceptance: speculative decoding, the draft "
         "tokens accepted counted). memory --draft mtp holds the module's weights and KV cache too.")


SPECULATION = ("Speculative decoding (--acceptance): a row is one step -- the draft's K proposals (draft_flops: "
               "a draft model or the MTP module, as vLLM's proposer runs it: one forward over the K+1 verified "
               "tokens, then K-1 single-token forwards) and the "
               "target's verify, a forward of K+1 new tokens over T cached with logits at each (the terms: prefill "
               "--cached-prefix T --seq K+1 --logits all); expected_tokens_per_step E = 1 + a_1 + a_1 a_2 + ... "
               "(the target's own token counted); per token = per accepted token, over B x E (docs/cost-model.md).")
SPECULATION_GENERATE = ("Speculative generation (--acceptance): the decode row runs steps = ceil((N-1)/E) "
                        "speculative steps, the i-th over S + floor(i E) cached tokens (each step yields E tokens "
                        "in expectation); a draft model prefills the prompt too (draft_flops of the prefill row) "
                        "(docs/cost-model.md, \"Speculative decoding\").")
SPECULATE = ("speedup = a plain decode step's time (without a device: FLOPs) per token over the speculative step's; "
             "break_even_acceptance = the one rate a at which they are equal, (E(a, K) = step time / decode time; "
             "0 where speculation wins even at a = 0, empty where no a < 1 does); best = the K that costs least per token.")
SERVE = ("serve: a steady state of continuous batching with chunked prefill (every iteration one decode token per "
         "decoding request and prompt chunks within --max-batched-tokens); ttft = the request's own prompt "
         "iterations (+ queueing past the concurrency prompts keep up with); tpot = the rest of a request's cycle / "
         "(osl - 1); tokens_per_s_per_gpu = requests/s x osl / devices; per user = 1 / tpot (docs/cost-model.md, "
         "Serving under continuous batching).")
