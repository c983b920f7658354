#!/usr/bin/env bash
# Regenerates the committed sample: every op on cpu, sim and (when installed) torch-cpu,
# then the report. Run from the checkout root after `python setup.py build_ext --inplace`.
# Takes 7-14 minutes on a 2-core machine (more when it is busy), most of it in the simulator.
set -euo pipefail
OUT=${1:-results/sample-linux-x86_64}
rm -rf "$OUT"
BACKENDS=(-b cpu -b sim)
python -c "import torch" 2>/dev/null && BACKENDS+=(-b torch-cpu)
for op in conv2d matmul; do
    python -m mpskern.cli.main bench "$op" "${BACKENDS[@]}" -d float32 -d float16 --out "$OUT"
done
for op in gemm max_pool2d avg_pool2d softmax log_softmax layer_norm rms_norm batch_norm group_norm; do
    python -m mpskern.cli.main bench "$op" "${BACKENDS[@]}" --out "$OUT"
done
python -m mpskern.cli.main report "$OUT" -o "$OUT/report"
python -c "from mpskern.bench import schema; schema.write_csv('$OUT/bench.csv', schema.read_jsonl(['$OUT']))"
