#!/usr/bin/env bash
# gemm10's device run: install this tree (carried as .devkit/gemm10), then own_ab.py at
# 16, 2 (cores 0,1) and 8 threads, numpy's OpenBLAS at the same count, one process each.
set -u
R=$PWD
cd .devkit/gemm10 && timeout 120 python3 -m pip install -q --no-index --no-deps ../wheels/*.whl > $OUT/install.txt 2>&1 && \
  timeout 150 python3 -m pip install -q --no-index --no-build-isolation --no-deps . >> $OUT/install.txt 2>&1 || { tail -5 $OUT/install.txt; exit 1; }
A=$R/.devkit/gemm10/results/cpu-threads-xeon16/session10/tools/own_ab.py
cd "$(mktemp -d)"
lscpu | grep -i "model name" > $OUT/cpu.txt
echo "install done $(date +%T)" >> $OUT/cpu.txt
( time OPENBLAS_NUM_THREADS=16 timeout 40 python3 $A 16 gpt2,square 5 1 ) > $OUT/ab_16.txt 2>&1
( time OPENBLAS_NUM_THREADS=2 taskset -c 0,1 timeout 45 python3 $A 2 smallk ) > $OUT/ab_2k.txt 2>&1
( time OPENBLAS_NUM_THREADS=2 taskset -c 0,1 timeout 50 python3 $A 2 gpt2,square 5 1 ) > $OUT/ab_2.txt 2>&1
( time OPENBLAS_NUM_THREADS=8 timeout 30 python3 $A 8 gpt2,square 5 ) > $OUT/ab_8.txt 2>&1
cat $OUT/cpu.txt $OUT/ab_16.txt $OUT/ab_2k.txt $OUT/ab_2.txt $OUT/ab_8.txt
