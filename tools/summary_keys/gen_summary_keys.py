#!/usr/bin/env python3
"""Writes tests/train/data/summary_keys.txt: the key paths of summary.json and of the
metrics.jsonl records of `strata train` over a set of layouts, which
tests/train/test_summary_keys.cc checks every later build still writes (keys may be added,
never lost).

Usage: gen_summary_keys.py STRATA_BINARY OUTPUT

The fixture holds the layouts it was made from ("layout NAME<TAB>ARGS"), so the test runs
exactly them, then one "NAME<TAB>FILE<TAB>PATH" line per key path: an object member is
"a.b", an array's elements are "a[]" (the union over the elements, as over the records of
metrics.jsonl).
"""
import json
import os
import subprocess
import sys
import tempfile

MODEL = ("train --layers 2 --dim 32 --heads 2 --seq 16 --vocab 256 --data synthetic --batch 4 "
         "--steps 3 --lr 3e-3 --eval-every 2 --eval-batches 1 --sample-tokens 0 "
         "--peak-gflops 100 --threads 1")
LAYOUTS = [
    ("one", "--ckpt-every 2"),
    ("dp2-zero1", "--nproc 2 --zero 1"),
    ("dp2-zero3", "--nproc 2 --zero 3"),
    ("tp2", "--nproc 2 --tp 2"),
    ("pp2", "--nproc 2 --pp 2"),
    ("cp2", "--nproc 2 --cp 2"),
    ("ep2", "--nproc 2 --ep 2 --experts 4 --top-k 2"),
    ("bf16", "--precision bf16"),
]


def paths(value, prefix, out):
    if isinstance(value, dict):
        for k, v in value.items():
            p = f"{prefix}.{k}" if prefix else k
            out.add(p)
            paths(v, p, out)
    elif isinstance(value, list):
        for v in value:
            paths(v, prefix + "[]", out)


def main():
    binary, output = sys.argv[1], sys.argv[2]
    lines = []
    for name, extra in LAYOUTS:
        args = f"{MODEL} {extra}"
        lines.append(f"layout {name}\t{args}")
        with tempfile.TemporaryDirectory() as tmp:
            run = os.path.join(tmp, "run")
            env = dict(os.environ, OMP_NUM_THREADS="1")
            subprocess.run([binary, *args.split(), "--run-dir", run], check=True, env=env,
                           stdout=subprocess.DEVNULL)
            summary, metrics = set(), set()
            with open(os.path.join(run, "summary.json")) as f:
                paths(json.load(f), "", summary)
            with open(os.path.join(run, "metrics.jsonl")) as f:
                for line in f:
                    if line.strip():
                        paths(json.loads(line), "", metrics)
        lines += [f"{name}\tsummary.json\t{p}" for p in sorted(summary)]
        lines += [f"{name}\tmetrics.jsonl\t{p}" for p in sorted(metrics)]
    with open(output, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
