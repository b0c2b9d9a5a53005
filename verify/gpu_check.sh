#!/usr/bin/env bash
# GPU verification at real sizes on one H200, about 8 minutes (step 5, tensor parallel over two GPUs,
# is skipped in one line where fewer are visible). Writes reports under $OUT.
#   PYTHONPATH=. OUT=/tmp/out bash verify/gpu_check.sh
# DRY=1 runs the same steps on CPU, each on a small preset file with the structure of the
# real model (verify/dry/*.json), in about 20 s: run it so before a GPU run (the slow tests do:
# python -m pytest -m slow -k gpu_check). It times only step 1 (steps 2-4 count, --repeats 0)
# and runs torch on one thread (tiny matmuls gain nothing from more, and lose much on a busy
# machine).
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="${PYTHONPATH:-.}" PYTHONUNBUFFERED=1
OUT="${OUT:-reports/gpu}"
mkdir -p "$OUT"
if [ "${DRY:-0}" = 1 ]; then
  DEV=cpu; DT=float32; SEQ=64; SEQ_MOE=32; SEQ_MLA=32; REP=1; REP_REST=0; ATT=128,256; TILE=16
  SEQ_SHORT=16; SEQ_LONG=48; BATCH_BIG=4; BATCH_MID=2; SEQ_PAR=8
  export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
  DENSE=(--preset-file verify/dry/dense.json)
  MOE=(--preset-file verify/dry/moe.json)
  WINDOW=(--preset-file verify/dry/window.json)
  MLA=(--preset-file verify/dry/mla.json)
else
  DEV=cuda; DT=bfloat16; SEQ=4096,32768; SEQ_MOE=4096; SEQ_MLA=2048; REP=5; REP_REST=5; ATT=4096,16384,32768
  SEQ_SHORT=4096; SEQ_LONG=32768; BATCH_BIG=64; BATCH_MID=8   # 64 x 4k and 8 x 32k: K/V caches of 34 GB
  SEQ_PAR=2048
  TILE=128
  DENSE=(--preset llama-3.1-8b)
  MOE=(--preset qwen3-30b-a3b --layers 2)
  WINDOW=(--preset gpt-oss-20b --layers 2)   # one sliding-window layer, one global
  MLA=(--preset deepseek-v3 --layers 2)      # one dense-first layer, one with shared experts (~25 GB bf16)
fi
py() { python3 -m costcalc "$@"; }
# 1. Dense (llama-3.1-8b at full depth): prefill up to 32k, a chunk, decode at long context; the
#    run's measured profile (GEMM peak, memory bandwidth) is saved and every timing predicted on it.
py verify "${DENSE[@]}" --device "$DEV" --dtype "$DT" --workloads prefill,cached_prefill,decode --seq "$SEQ" \
   --tile "$TILE" --repeats "$REP" --attention-lengths "$ATT" --report "$OUT/dense" \
   --save-profile "$OUT/measured-profile.json" -f csv -o "$OUT/dense-checks.csv" 2>&1 | tee "$OUT/dense.log"
# Steps 1b-4: one after another on a GPU (each times its runs); with DRY=1 they only count
# (--repeats 0), so they run side by side and the script takes seconds.
pids=()
later() { if [ "${DRY:-0}" = 1 ]; then "$@" & pids+=($!); else "$@"; fi; }
# 1b. The roofline at batch: decode of many sequences (the 8B stack, bf16), each run predicted on
#     the profile it measures itself (as step 1); reports hold measured / predicted per row and
#     whether the floor holds.
decode_big() {
  py verify "${DENSE[@]}" --device "$DEV" --dtype "$DT" --workloads decode --seq "$SEQ_SHORT" --batch "$BATCH_BIG" \
     --repeats "$REP_REST" --report "$OUT/decode-batch-$BATCH_BIG" 2>&1 | tee "$OUT/decode-batch-$BATCH_BIG.log"
}
decode_mid() {
  py verify "${DENSE[@]}" --device "$DEV" --dtype "$DT" --workloads decode --seq "$SEQ_LONG" --batch "$BATCH_MID" \
     --repeats "$REP_REST" --report "$OUT/decode-batch-$BATCH_MID" 2>&1 | tee "$OUT/decode-batch-$BATCH_MID.log"
}
# 2. MoE (qwen3-30b-a3b, two layers): every workload.
moe() {
  py verify "${MOE[@]}" --device "$DEV" --dtype "$DT" --seq "$SEQ_MOE" --tile "$TILE" --repeats "$REP_REST" \
     --report "$OUT/moe" 2>&1 | tee "$OUT/moe.log"
}
# 3. Sliding windows beside global layers, MoE (gpt-oss-20b).
window() {
  py verify "${WINDOW[@]}" --device "$DEV" --dtype "$DT" --seq "$SEQ_MOE" --tile "$TILE" --repeats "$REP_REST" \
     --report "$OUT/window" 2>&1 | tee "$OUT/window.log"
}
# 4. MLA (naive prefill, absorbed decode), dense-first layers and shared experts (deepseek-v3).
mla() {
  py verify "${MLA[@]}" --device "$DEV" --dtype "$DT" --seq "$SEQ_MLA" --tile "$TILE" --repeats "$REP_REST" \
     --report "$OUT/mla" 2>&1 | tee "$OUT/mla.log"
}
later decode_big
later decode_mid
later moe
later window
later mla
for pid in "${pids[@]}"; do wait "$pid"; done   # set -e: a failed step fails the script
# 5. Tensor parallel (tp 2, nccl): the dense stack (two layers) sharded over two GPUs, each rank's FLOPs per
#    operator and collectives held to the per-device numbers (verify --tp). DRY=1: two CPU processes on gloo.
#    Skipped, in one line, where fewer than two GPUs are visible.
if [ "${DRY:-0}" = 1 ]; then GPUS=2; else GPUS=$(python3 -c 'import torch; print(torch.cuda.device_count())'); fi
if [ "$GPUS" -ge 2 ]; then
  py verify "${DENSE[@]}" --layers 2 --device "$DEV" --dtype "$DT" --tp 2 --workloads prefill,decode \
     --seq "$SEQ_PAR" --batch 2 -f csv -o "$OUT/parallel-tp2.csv" 2>&1 | tee "$OUT/parallel-tp2.log"
else
  echo "gpu_check: parallel case (tp 2) skipped: $GPUS GPU(s) visible, 2 needed"
fi
echo "gpu_check: done, reports in $OUT"
