#!/usr/bin/env python3
"""Time from a rank's death to the first completed step after the supervisor's restart.

Runs `strata train --nproc N --max-restarts 1 --inject kill --inject-rank R --inject-step S
--json` and timestamps every output line as it arrives. Rank R kills itself at the start of
step S (counted from 1), right after rank 0 printed step S-1's record, so that record's arrival is the
death (to within a step's data loading); the first step record after the launcher's
"restart 1/1" line is the first completed step of the new job. Also reports the save stall
of the uninterrupted part (summary.json of the final attempt) against the median step.

  python3 bench/ckpt/recovery.py --strata build/strata --model tiny --nproc 2 --reps 3
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time


def run_once(args, run_dir):
    cmd = [args.strata, "train", "--model", args.model, "--nproc", str(args.nproc), "--zero",
           str(args.zero), "--batch", str(args.batch), "--steps", str(args.steps), "--threads",
           str(args.threads), "--sample-tokens", "0", "--eval-every", "0", "--eval-batches", "1",
           "--ckpt-every", str(args.every), "--run-dir", run_dir, "--json", "--max-restarts", "1",
           "--inject", "kill", "--inject-rank", str(args.nproc - 1), "--inject-step",
           str(args.kill_step)]
    env = dict(os.environ, STRATA_DUMP_DIR=run_dir)
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    lines = []  # (time, stream, text)
    lock = threading.Lock()

    def pump(stream, name):
        for line in stream:
            with lock:
                lines.append((time.monotonic(), name, line.rstrip("\n")))

    threads = [threading.Thread(target=pump, args=(p.stdout, "out")),
               threading.Thread(target=pump, args=(p.stderr, "err"))]
    for t in threads:
        t.start()
    p.wait()
    for t in threads:
        t.join()
    if p.returncode != 0:
        sys.exit("recovery: train failed:\n" + "\n".join(l for _, _, l in lines[-20:]))
    lines.sort()
    death = first = restart = None
    for t, name, text in lines:
        if name == "err" and "restart 1/1" in text:
            restart = t
            continue
        if name != "out" or not text.startswith("{"):
            continue
        rec = json.loads(text)
        if "loss" not in rec:
            continue
        if restart is None and rec["step"] == args.kill_step - 1:
            death = t
        elif restart is not None and first is None:
            first = t
    if death is None or first is None or restart is None:
        sys.exit("recovery: could not find the death, restart and first step in the output")
    summary = json.load(open(os.path.join(run_dir, "summary.json")))
    return {"death_to_restart_s": restart - death, "death_to_first_step_s": first - death,
            "median_step_ms": summary["median_ms"],
            "stall_ms_mean": summary["ckpt"]["stall_s"]["mean"] * 1e3,
            "write_s_mean": summary["ckpt"]["write_s"]["mean"]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--strata", default="build/strata")
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--zero", type=int, default=1)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--every", type=int, default=5)
    ap.add_argument("--kill-step", type=int, default=7)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    results = []
    for r in range(args.reps):
        with tempfile.TemporaryDirectory(prefix="strata-recovery-") as d:
            results.append(run_once(args, os.path.join(d, "run")))
        print(f"repeat {r + 1}/{args.reps}: {json.dumps(results[-1])}", file=sys.stderr)
    med = {k: statistics.median(x[k] for x in results) for k in results[0]}
    med["stall_pct_of_step"] = 100 * med["stall_ms_mean"] / med["median_step_ms"]
    if args.json:
        print(json.dumps({"model": args.model, "nproc": args.nproc, "zero": args.zero,
                          "reps": args.reps, **med}))
    else:
        print(f"{args.model} on {args.nproc} ranks (ZeRO {args.zero}), median of {args.reps}: "
              f"death -> restart {med['death_to_restart_s']:.2f} s, death -> first step after "
              f"restart {med['death_to_first_step_s']:.2f} s (step {med['median_step_ms']:.0f} ms); "
              f"save stall {med['stall_ms_mean']:.2f} ms = {med['stall_pct_of_step']:.2f}% of a step, "
              f"background write {med['write_s_mean']:.3f} s")


if __name__ == "__main__":
    main()
