#!/usr/bin/env bash
# Every GPU check of the project in one command, for a short session on a lent GPU machine:
# the Triton kernel tests (compiled), the block/warp sweep at several head widths, the
# dense-vs-Triton crossover for complete graphs, and the attention / sequence / Tox21-epoch
# tables against PyG. Writes everything under OUT (default runs/gpu_suite) and prints the
# tables. Each step has its own time limit, so one slow step cannot eat the whole session.
#
#   GRAPHATTN_DATA=/path/to/data bash benchmarks/gpu_suite.sh [OUT]
#
# Needs: a CUDA GPU, torch with CUDA, torch-geometric, triton, pytest (rdkit for the Tox21 step).
set -u
cd "$(dirname "$0")/.."
OUT=${1:-runs/gpu_suite}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
step() {  # step NAME SECONDS COMMAND...
    local name=$1 limit=$2; shift 2
    echo "=== $name (limit ${limit}s)"
    timeout "$limit" "$@" 2>&1 | tee "$OUT/$name.log" | grep -v -E "benchmark:|tox21 epoch:|rounds:" | tail -40
    echo "--- $name: exit ${PIPESTATUS[0]}"
}
python3 -c "import torch, triton; assert torch.cuda.is_available(), 'no CUDA GPU'; \
print(torch.cuda.get_device_name(), torch.__version__, 'triton', triton.__version__)" || exit 2
step tests 150 python3 -m pytest -q -p no:cacheprovider tests/ops/test_fused_triton.py
for c in 32 64 128; do
    step "sweep_c$c" 150 python3 benchmarks/triton_sweep.py --channels "$c" --blocks 8 16 32 --warps 1 2 4 \
        --cases 100k molecules --out "$OUT/triton_sweep_c$c.json"
done
step crossover 200 python3 benchmarks/crossover.py --device cuda --out "$OUT/crossover_cuda.json"
step attention 300 python3 benchmarks/attention.py --device cuda --large \
    --cases random-100k random-200k molecules-128 --out "$OUT/attention_cuda.json"
step sequence 90 python3 benchmarks/sequence.py --device cuda --batch 8 --length 512 --repeats 30 \
    --out "$OUT/sequence_cuda.json"
step tox21_epoch 240 python3 benchmarks/tox21_epoch.py --device cuda --repeats 5 --warmup 1 \
    --out "$OUT/tox21_epoch_cuda.json"
echo "results in $OUT"
