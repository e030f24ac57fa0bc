#!/usr/bin/env bash
# Every GPU check of the project in one command, for a short session on a lent GPU machine:
# the Triton kernel tests (compiled), the attention table against PyG with the compiled row,
# the same in bfloat16 (when benchmarks/attention.py has that option), the sequence table
# (complete graphs on SDPA, with batch= and from edge_index alone, vs plain SDPA and
# nn.MultiheadAttention), the dense-vs-Triton crossover, one block/warp sweep and the Tox21
# epoch. Writes everything under OUT (default runs/gpu_suite) and prints the tables. Each step
# has its own time limit (together 440 s, under 8 minutes), most important first, so one slow
# step cannot eat the whole session.
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
step tests 90 python3 -m pytest -q -p no:cacheprovider tests/ops/test_fused_triton.py \
    tests/ops/test_dense.py tests/nn/test_complete_blocks.py
CASES="random-100k molecules-128"
step attention 90 python3 benchmarks/attention.py --device cuda --compile --cases $CASES \
    --repeats 5 --min-time 0.5 --timeout 40 --out "$OUT/attention_cuda.json"
# the bf16 row (the layer under bfloat16 autocast), only when attention.py offers --bf16
if python3 benchmarks/attention.py --help 2>/dev/null | grep -q -- "--bf16"; then
    step attention_bf16 60 python3 benchmarks/attention.py --device cuda --bf16 --cases $CASES \
        --repeats 5 --min-time 0.5 --timeout 25 --out "$OUT/attention_cuda_bf16.json"
else
    echo "=== attention_bf16: skipped (benchmarks/attention.py has no --bf16 option)"
fi
step sequence 60 python3 benchmarks/sequence.py --device cuda --batch 8 --length 512 --repeats 20 \
    --out "$OUT/sequence_cuda.json"
step crossover 45 python3 benchmarks/crossover.py --device cuda --sizes 16 64 128 --repeats 3 --min-time 0.2 \
    --out "$OUT/crossover_cuda.json"
step sweep_c64 45 python3 benchmarks/triton_sweep.py --channels 64 --blocks 16 32 --warps 2 4 \
    --cases 100k molecules --out "$OUT/triton_sweep_c64.json"
step tox21_epoch 50 python3 benchmarks/tox21_epoch.py --device cuda --repeats 2 --warmup 1 --timeout 22 \
    --out "$OUT/tox21_epoch_cuda.json"
echo "results in $OUT"
