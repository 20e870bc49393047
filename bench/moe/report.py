"""Reads bench/moe/run.sh's outputs and prints the figures docs/moe.md records."""
import glob, json, os, statistics, sys

out, repeats = sys.argv[1], int(sys.argv[2])
if os.path.exists(f"{out}/cpu.txt"):
    print(open(f"{out}/cpu.txt").read().strip())
if os.path.exists(f"{out}/layer.jsonl"):
    rows = [json.loads(l) for l in open(f"{out}/layer.jsonl")]
    s = [r["tokens_per_s"] for r in rows if r["impl"] == "strata"]
    t = [r["tokens_per_s"] for r in rows if r["impl"] == "torch"]
    print(f"MoE block fwd+bwd (2048 tokens, C 256, E 8, K 2, F 1.25): strata {statistics.median(s):.0f} "
          f"tok/s, PyTorch {rows[1].get('torch')} {statistics.median(t):.0f} tok/s: "
          f"{statistics.median(s) / statistics.median(t):.2f}x (median of {len(s)})")


def a2a_share(run_dir):
    """Share of rank 0's step time inside ep all-to-all spans (dispatch and combine)."""
    ev = json.load(open(f"{run_dir}/trace-rank0.json"))
    ev = ev["traceEvents"] if isinstance(ev, dict) else ev
    step = sum(e.get("dur", 0) for e in ev if e.get("cat") == "step")
    comm = sum(e.get("dur", 0) for e in ev if e.get("cat") == "ep_comm")
    return comm / step if step else 0.0


def med(name, key):
    return statistics.median(json.load(open(f"{out}/{name}_{r}.json"))[key] for r in range(1, repeats + 1))


def states(name):
    """Rank 0's model states and gradient reduce bytes per step from summary.json."""
    j = json.load(open(f"{out}/{name}_1/summary.json"))
    x = j.get("experts", {})
    return (j["engine_memory"]["model_states"], j["model_states_formula"]["total"],
            j["parallel"]["grad_reduce_bytes_per_step"], x.get("expert_model_states", 0),
            x.get("grad_reduce_bytes_experts", 0), j.get("memory", {}).get("total", {}).get("peak", 0))


if not os.path.exists(f"{out}/ep1_1.json"):
    sys.exit(0)
for n in ("ep1", "ep2"):
    st, formula, red, xst, xred, peak = states(n)
    print(f"{n}: rank 0 model states {st} B = {st / 2**20:.2f} MiB (formula {formula} B; experts "
          f"{xst} B), gradient reduce bytes per step {red} = {red / 2**20:.2f} MiB (experts {xred}), "
          f"peak memory {peak / 2**20:.1f} MiB")
a, b = states("ep1"), states("ep2")
print(f"ep 2 / ep 1: model states {b[0] / a[0]:.3f}x, gradient reduce bytes {b[2] / a[2]:.3f}x, "
      f"peak memory {b[5] / a[5]:.3f}x")
tps = {n: med(n, "median_tokens_per_s") for n in ("ep1", "ep2", "one")}
share = {n: statistics.median(a2a_share(f"{out}/{n}_{r}") for r in range(1, repeats + 1))
         for n in ("ep1", "ep2")}
print(f"2 ranks, 4 blocks C 128, E 8, K 2, batch 16 x 64: ep 1 {tps['ep1']:.0f} tok/s "
      f"(all-to-all {100 * share['ep1']:.1f}% of the step), ep 2 {tps['ep2']:.0f} tok/s "
      f"(all-to-all {100 * share['ep2']:.1f}%): ep 2 / ep 1 = {tps['ep2'] / tps['ep1']:.2f}x")
print(f"weak scaling, 1 rank batch 8 -> 2 ranks batch 16: ep 2 {tps['ep2'] / (2 * tps['one']):.2f}, "
      f"ep 1 {tps['ep1'] / (2 * tps['one']):.2f} (1 rank {tps['one']:.0f} tok/s)")
for n in ("moe", "dense"):
    if not os.path.exists(f"{out}/{n}.json"):
        continue
    j = json.load(open(f"{out}/{n}.json"))
    mem = j.get("memory", {})
    mib = lambda k: mem.get(k, {}).get("peak", 0) / 2**20
    print(f"{n:5s}: params {j.get('params')}, final loss {j['final_loss']:.4f}, eval loss "
          f"{j['eval_loss']:.4f} (floor {j.get('entropy_floor', float('nan')):.4f}), "
          f"{j['median_tokens_per_s']:.0f} tok/s, peak memory {mib('total'):.1f} MiB "
          f"(model states {mib('parameters') + mib('gradients') + mib('optimizer'):.1f}, "
          f"activations {mib('activations'):.1f})")
