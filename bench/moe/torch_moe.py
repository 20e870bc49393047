"""One MoE block forward+backward in PyTorch 1.13 (the peer of bench_moe.cc): router, top-k
gating (softmax, or DeepSeek-V3's sigmoid scores) renormalised over the k, capacity
ceil(F*N*K/E) with k-major drops (every first choice before any second, token order within;
F <= 0: dropless), expert MLPs of H units (c_fc H = 4C unless --expert-ffn, tanh GELU, c_proj),
S shared experts as one MLP of S*H units on every token, Switch aux loss (on the softmax, or
on s / sum s for sigmoid scores) and router z-loss. Prints one JSON line.

Written as an efficient eager layer: one stable sort of the (token, choice) pairs by expert
gives each expert's rows (and the capacity positions), one index_select gathers them, a loop
over experts runs addmm/GELU/addmm on contiguous chunks, one index_add combines.
--check: the inputs of bench_moe.cc --check (hashed below), one step, checksums."""
import argparse, json, math, time
import numpy as np
import torch
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--tokens", type=int, default=2048)
p.add_argument("--dim", type=int, default=256)
p.add_argument("--experts", type=int, default=8)
p.add_argument("--top-k", type=int, default=2)
p.add_argument("--capacity", type=float, default=1.25)
p.add_argument("--expert-ffn", type=int, default=0)
p.add_argument("--shared-experts", type=int, default=0)
p.add_argument("--score", choices=("softmax", "sigmoid"), default="softmax")
p.add_argument("--iters", type=int, default=20)
p.add_argument("--threads", type=int, default=1)
p.add_argument("--check", action="store_true")
a = p.parse_args()
torch.set_num_threads(a.threads)
torch.manual_seed(1)
N, C, E, K, S = a.tokens, a.dim, a.experts, a.top_k, a.shared_experts
H = a.expert_ffn if a.expert_ffn > 0 else 4 * C
AUX, Z = 1e-2, 1e-3  # MoEConfig's aux_coef, z_coef
ids = iter(range(1 << 30))


def hashed(n, s):
    """bench_moe.cc's hashed(): s * (u - 0.5), u the top 24 bits of splitmix64's finaliser."""
    with np.errstate(over="ignore"):
        h = np.arange(n, dtype=np.uint64) + np.uint64(next(ids)) * np.uint64(0x9E3779B97F4A7C15)
        h = (h ^ (h >> np.uint64(33))) * np.uint64(0xFF51AFD7ED558CCD)
        h = (h ^ (h >> np.uint64(33))) * np.uint64(0xC4CEB9FE1A85EC53)
        h ^= h >> np.uint64(33)
    u = (h >> np.uint64(40)).astype(np.float32) * np.float32(1.0 / 16777216.0) - np.float32(0.5)
    return torch.from_numpy(np.float32(s) * u)


def fill(shape, s, grad=True):
    n = math.prod(shape)
    t = hashed(n, s) if a.check else s * (torch.rand(n) - 0.5)
    return t.view(*shape).requires_grad_(grad)


router = fill((E, C), 0.1)
x = fill((N, C), 2.0)
dy = fill((N, C), 1e-3, grad=False)
w1, b1, w2, b2 = [], [], [], []
for e in range(E + (S > 0)):  # the routed experts, then the shared MLP (S*H units)
    h = H if e < E else S * H
    for lst, shape in ((w1, (h, C)), (b1, (h,)), (w2, (C, h)), (b2, (C,))):
        lst.append(fill(shape, 0.05))
cap = N * K if a.capacity <= 0 else math.ceil(a.capacity * N * K / E - 1e-9)
arange = torch.arange(N * K)


def mlp(v, e):
    return F.linear(F.gelu(F.linear(v, w1[e], b1[e]), approximate="tanh"), w2[e], b2[e])


def step():
    logits = F.linear(x, router)  # (N, E)
    if a.score == "sigmoid":
        scores = torch.sigmoid(logits)
        balance = scores / scores.sum(-1, keepdim=True)
    else:
        scores = balance = torch.softmax(logits, dim=-1)
    top_s, top_i = scores.topk(K, dim=-1)
    gates = (top_s / top_s.sum(-1, keepdim=True)).t().reshape(-1)  # (K*N), k-major
    flat = top_i.t().reshape(-1)  # (K*N) experts, k-major: index k*N + t
    order = torch.sort(flat, stable=True).indices  # by expert, k-major and token order within
    counts = torch.bincount(flat, minlength=E)
    if cap < N * K:  # each expert keeps the first `cap` of its queue
        pos = arange - (counts.cumsum(0) - counts)[flat[order]]
        order = order[pos < cap]
        counts = counts.clamp(max=cap)
    tok = order % N
    xs = x.index_select(0, tok)
    outs = [mlp(xe, e) for e, xe in enumerate(xs.split(counts.tolist())) if xe.shape[0] > 0]
    o = torch.cat(outs) * gates.index_select(0, order).unsqueeze(1)
    y = torch.zeros(N, C).index_add(0, tok, o)
    if S > 0:
        y = y + mlp(x, E)
    f = torch.bincount(flat, minlength=E).float() / (N * K)
    aux = AUX * E * (f * balance.mean(0)).sum()
    z = Z * (torch.logsumexp(logits, -1) ** 2).mean()
    loss = (y * dy).sum() + aux + z
    loss.backward()
    return y, aux, z


def sq(ts):
    return sum(float((t.grad.double() ** 2).sum()) for t in ts if t.grad is not None)


if a.check:
    y, aux, z = step()
    y = y.detach().double()
    print(json.dumps({"impl": "torch", "check": {
        "y_dot_dy": float((y * dy.double()).sum()), "y_abs": float(y.abs().sum()),
        "aux": float(aux), "z": float(z), "dx_sq": sq([x]), "router_grad_sq": sq([router]),
        "experts_fc_grad_sq": sq(w1[:E]), "experts_proj_grad_sq": sq(w2[:E]),
        "shared_fc_grad_sq": sq(w1[E:])}}))
    raise SystemExit
step()
t0 = time.perf_counter()
for _ in range(a.iters):
    step()
s = time.perf_counter() - t0
print(json.dumps({"impl": "torch", "torch": torch.__version__, "tokens": N, "dim": C,
                  "experts": E, "top_k": K, "expert_ffn": H, "shared_experts": S,
                  "score": a.score, "ms_per_step": 1e3 * s / a.iters,
                  "tokens_per_s": N * a.iters / s}))
