#!/usr/bin/env bash
# GPU verification at real sizes on one H200, about 8 minutes. Writes reports under $OUT.
#   PYTHONPATH=. OUT=/tmp/out bash verify/gpu_check.sh
# DRY=1 runs the same steps at toy sizes on CPU (how CI tests this script's logic).
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="${PYTHONPATH:-.}" PYTHONUNBUFFERED=1
OUT="${OUT:-reports/gpu}"
mkdir -p "$OUT"
if [ "${DRY:-0}" = 1 ]; then
  DEV=cpu; DT=float32; LAYERS=1; SEQ=64; SEQ_MOE=32; REP=1; ATT=128,256; BIG=toy
else
  DEV=cuda; DT=bfloat16; LAYERS=""; SEQ=4096,32768; SEQ_MOE=4096; REP=5; ATT=4096,16384,32768; BIG=llama-3.1-8b
fi
py() { python3 -m costcalc "$@"; }
# 1. llama-3.1-8b at full depth (toy when dry): prefill up to 32k, decode at long context.
py verify --preset "$BIG" --device "$DEV" --dtype "$DT" ${LAYERS:+--layers $LAYERS} \
   --workloads prefill,chunk,decode --seq "$SEQ" --tile 128 --repeats "$REP" \
   --attention-lengths "$ATT" --report "$OUT/dense" -f csv -o "$OUT/dense-checks.csv" 2>&1 | tee "$OUT/dense.log"
# 2. MoE with reduced layers: every workload.
py verify --preset qwen3-30b-a3b --device "$DEV" --dtype "$DT" $( [ "${DRY:-0}" = 1 ] && echo --layers 1 --vocab 1000 || echo --layers 2 ) \
   --seq "$SEQ_MOE" --tile 128 --repeats "$REP" --report "$OUT/moe" 2>&1 | tee "$OUT/moe.log"
# 3. Sliding windows beside global layers, MoE (gpt-oss-20b: one layer of each kind).
py verify --preset gpt-oss-20b --device "$DEV" --dtype "$DT" --layers 2 $( [ "${DRY:-0}" = 1 ] && echo --vocab 1000 ) \
   --seq "$SEQ_MOE" --tile 128 --repeats "$REP" --report "$OUT/window" 2>&1 | tee "$OUT/window.log"
# 4. MLA (naive prefill, absorbed decode), dense-first and shared experts: deepseek-v3, one layer of each kind
#    (~25 GB of bf16 weights: GPU only).
if [ "${DRY:-0}" != 1 ]; then
  py verify --preset deepseek-v3 --device "$DEV" --dtype "$DT" --layers 2 --seq 2048 --tile 128 \
     --repeats "$REP" --report "$OUT/mla" 2>&1 | tee "$OUT/mla.log"
fi
echo "gpu_check: done, reports in $OUT"
