#!/usr/bin/env bash
set -u
R=$PWD
mkdir -p .devkit && cp -r ../wheels .devkit/ && timeout 100 bash ../device-setup > $OUT/setup.txt 2>&1 || { tail -5 $OUT/setup.txt; exit 1; }
cd "$(mktemp -d)"
A=$R/../mm8-tools/ab2.py
( time taskset -c 0,1 timeout 35 python3 $A 2 ) > $OUT/t2.txt 2>&1
( time timeout 35 python3 $A 16 ) > $OUT/t16.txt 2>&1
( time timeout 40 python3 $A 8 ) > $OUT/t8.txt 2>&1
tail -n 3 $OUT/*.txt
