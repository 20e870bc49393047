#!/usr/bin/python3
"""strata vs PyTorch, one GPT forward+backward (optionally + AdamW) at the same batch and
thread count, interleaved round by round so both see the same machine load.

  /usr/bin/python3 bench/kernels/compare_torch.py --build build --model tiny --batch 8 \
      --threads 2 --rounds 5 [--optimizer]

Prints each round, then the medians: tokens/s of each, the ratio, strata's model GFLOP/s
(6N + 12*L*d*T per token) and its fraction of the sgemm peak measured by bench_kernels in the
same run: the best of strata's own GEMM (BM_gemm_peak) and OpenBLAS (BM_sgemm_peak) at
1024^3 and 2048^3, i.e. the fastest sgemm this machine offers.
--torch-coretype sets OPENBLAS_CORETYPE for the PyTorch process only (PyTorch's matmuls go
to OpenBLAS; e.g. SkylakeX selects its AVX-512 kernels where the environment pins Haswell).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def gbench(binary, filt, threads, min_time):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = subprocess.run([binary, f"--benchmark_filter={filt}", "--benchmark_format=json",
                          f"--benchmark_min_time={min_time}"], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)["benchmarks"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--optimizer", action="store_true")
    ap.add_argument("--torch-coretype", default=None)
    a = ap.parse_args()
    if a.batch != 8:
        sys.exit("bench_gpt is registered for batch 8 only")
    bench_gpt = os.path.join(a.build, "bench", "bench_gpt")
    bench_kernels = os.path.join(a.build, "bench", "bench_kernels")
    name = f"{a.model}_step" if a.optimizer else f"{a.model}_fwd_bwd"
    if a.model != "tiny" and not a.optimizer:
        sys.exit("bench_gpt registers forward+backward alone for tiny only")
    s_tok, t_tok, s_gf, peaks, s_cpu, t_cpu = [], [], [], [], [], []
    for r in range(a.rounds):
        peak = max(b["GFLOP/s"] for b in gbench(bench_kernels, "gemm_peak", a.threads, 0.5))
        s = gbench(bench_gpt, f"BM_train_step/{name}/", a.threads, 3)[0]
        cmd = [sys.executable, os.path.join(HERE, "torch_step.py"), "--model", a.model,
               "--batch", str(a.batch), "--threads", str(a.threads), "--iters", "6"]
        if a.optimizer:
            cmd.append("--optimizer")
        env = dict(os.environ)
        if a.torch_coretype:
            env["OPENBLAS_CORETYPE"] = a.torch_coretype
        t = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True,
                                      env=env).stdout)
        s_cpu.append(s["cpu_time"])
        t_cpu.append(t["cpu_ms"])
        s_tok.append(s["tok/s"])
        s_gf.append(s["GFLOP/s"])
        t_tok.append(t["tokens_per_s"])
        peaks.append(peak)
        print(f"round {r}: strata {s['tok/s']:.0f} tok/s ({s['GFLOP/s']:.1f} GFLOP/s), "
              f"torch {t['tokens_per_s']:.0f} tok/s, sgemm peak {peak:.1f} GFLOP/s; "
              f"cpu ms/step strata {s['cpu_time']:.0f} (main thread), torch {t['cpu_ms']:.0f} "
              f"(process)", flush=True)
    ms, mt, mg, mp = (statistics.median(x) for x in (s_tok, t_tok, s_gf, peaks))
    print(f"median: strata {ms:.0f} tok/s, torch {mt:.0f} tok/s, ratio {ms / mt:.2f}x; "
          f"strata {mg:.1f} GFLOP/s = {100 * mg / mp:.0f}% of sgemm peak {mp:.1f} GFLOP/s "
          f"({a.model}, batch {a.batch}, {a.threads} threads, "
          f"{'with' if a.optimizer else 'without'} AdamW"
          f"{', torch OPENBLAS_CORETYPE=' + a.torch_coretype if a.torch_coretype else ''})")
    if a.threads == 1:
        print(f"cpu time per step (1 thread, robust to machine load): strata "
              f"{statistics.median(s_cpu):.0f} ms, torch {statistics.median(t_cpu):.0f} ms, "
              f"ratio {statistics.median(t_cpu) / statistics.median(s_cpu):.2f}x")


if __name__ == "__main__":
    main()
