#!/usr/bin/python3
"""bf16 forward+backward: strata fp32, strata bf16 (kernels::gemm_bf16 as STRATA_KERNELS=auto
chooses: oneDNN for the large products on an AVX-512 BF16 CPU without AMX), strata bf16 on its
own kernel only (STRATA_KERNELS=avx512bf16, on such a CPU) and PyTorch 1.13 under torch.autocast("cpu", dtype=torch.bfloat16), one model step
without the optimizer, same batch and threads, interleaved round by round.

  /usr/bin/python3 bench/kernels/compare_bf16.py --build build --threads 1 --rounds 3 \
      [--models tiny,L12] [--min-time 2] [--no-own] [--baseline OTHER_BUILD]

Models: tiny (4 layers, dim 256, seq 256, batch 8) and L12 (12 layers, dim 768, 12 heads,
seq 256, vocab 256, batch 4). Reports CPU time per step (the process's, robust to other jobs
on a shared machine when --threads 1) and wall tokens/s, and the ratios strata bf16 / torch
bf16 and strata bf16 / strata fp32 on CPU time.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BATCH = {"tiny": 8, "L12": 4}


def strata(build, name, threads, min_time, kernels="auto"):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), STRATA_KERNELS=kernels)
    out = subprocess.run([os.path.join(build, "bench", "bench_gpt"),
                          f"--benchmark_filter=BM_fwd_bwd/{name}/", "--benchmark_format=json",
                          f"--benchmark_min_time={min_time}"], env=env, check=True, capture_output=True,
                         text=True).stdout
    b = json.loads(out)["benchmarks"][0]
    return {"cpu_ms": b["cpu_time"], "tok_s": b["tok/s"]}


def torch(model, threads):
    out = subprocess.run([sys.executable, os.path.join(HERE, "torch_step.py"), "--model", model,
                          "--batch", str(BATCH[model]), "--threads", str(threads), "--iters", "5",
                          "--autocast", "bf16"], check=True, capture_output=True, text=True).stdout
    t = json.loads(out)
    return {"cpu_ms": t["cpu_ms"], "tok_s": t["tokens_per_s"], "impl": t["impl"]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--models", default="tiny,L12")
    ap.add_argument("--min-time", type=float, default=2.0,
                    help="seconds of CPU time per strata measurement (Google Benchmark)")
    ap.add_argument("--baseline", default="",
                    help="another build directory whose strata bf16 is timed in the same rounds "
                         "(e.g. the previous commit's), reported beside the current build")
    ap.add_argument("--no-own", action="store_true",
                    help="skip the run of strata's own bf16 kernel only (STRATA_KERNELS=avx512bf16)")
    a = ap.parse_args()
    info = open("/proc/cpuinfo").read().splitlines()
    cpu = next((l.split(":", 1)[1].strip() for l in info if l.startswith("model name")), "?")
    flags = next((l.split(":", 1)[1].split() for l in info if l.startswith("flags")), [])
    bf = [f for f in flags if f in ("avx512f", "avx512_bf16", "amx_bf16", "amx_tile")]
    print(f"machine: {cpu}, flags {' '.join(bf)}; {a.threads} thread(s); "
          f"load average {os.getloadavg()[0]:.1f}")
    for model in a.models.split(","):
        own = "avx512_bf16" in flags and "amx_bf16" not in flags  # auto takes oneDNN there
        own = own and not a.no_own
        runs = {"fp32": [], "bf16": [], "torch": []}
        if own:
            runs["own"] = []
        if a.baseline:
            runs["base"] = []
        for r in range(a.rounds):
            runs["fp32"].append(strata(a.build, f"{model}_fp32", a.threads, a.min_time))
            runs["bf16"].append(strata(a.build, f"{model}_bf16", a.threads, a.min_time))
            if own:
                runs["own"].append(strata(a.build, f"{model}_bf16", a.threads, a.min_time,
                                          "avx512bf16"))
            if a.baseline:
                runs["base"].append(strata(a.baseline, f"{model}_bf16", a.threads, a.min_time))
            runs["torch"].append(torch(model, a.threads))
            f, b, t = runs["fp32"][-1], runs["bf16"][-1], runs["torch"][-1]
            o = f", strata bf16 own kernel {runs['own'][-1]['cpu_ms']:.0f}" if own else ""
            if a.baseline:
                o += f", baseline build bf16 {runs['base'][-1]['cpu_ms']:.0f}"
            print(f"{model} round {r + 1}: cpu ms/step strata fp32 {f['cpu_ms']:.0f}, strata bf16 "
                  f"{b['cpu_ms']:.0f}{o}, {t['impl']} {t['cpu_ms']:.0f}; wall tok/s "
                  f"{f['tok_s']:.0f} / {b['tok_s']:.0f} / {t['tok_s']:.0f}", flush=True)
        med = {k: statistics.median(x["cpu_ms"] for x in v) for k, v in runs.items()}
        print(f"{model} (batch {BATCH[model]}, seq 256) median cpu ms/step: strata fp32 "
              f"{med['fp32']:.0f}, strata bf16 {med['bf16']:.0f}, torch autocast bf16 "
              f"{med['torch']:.0f}; strata bf16 vs torch bf16 {med['torch'] / med['bf16']:.2f}x "
              f"(target >= 1.3x), strata bf16 vs strata fp32 {med['fp32'] / med['bf16']:.2f}x"
              + (f"; own kernel only {med['own']:.0f} ms, auto (oneDNN) vs own kernel "
                 f"{med['own'] / med['bf16']:.2f}x" if own else "")
              + (f"; baseline build bf16 {med['base']:.0f} ms, vs torch "
                 f"{med['torch'] / med['base']:.2f}x, this build vs baseline "
                 f"{med['base'] / med['bf16']:.2f}x" if a.baseline else ""))


if __name__ == "__main__":
    main()
