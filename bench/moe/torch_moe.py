"""One MoE block forward+backward in PyTorch 1.13 (the peer of bench_moe.cc): router,
top-k softmax gating renormalised over the k, capacity ceil(F*N*K/E) with k-major drops
(every first choice before any second, token order within), a loop over experts (c_fc 4C,
tanh GELU, c_proj), Switch aux loss and router z-loss. Prints one JSON line."""
import argparse, json, math, time
import torch
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--tokens", type=int, default=2048)
p.add_argument("--dim", type=int, default=256)
p.add_argument("--experts", type=int, default=8)
p.add_argument("--top-k", type=int, default=2)
p.add_argument("--capacity", type=float, default=1.25)
p.add_argument("--iters", type=int, default=20)
p.add_argument("--threads", type=int, default=1)
a = p.parse_args()
torch.set_num_threads(a.threads)
torch.manual_seed(1)
N, C, E, K = a.tokens, a.dim, a.experts, a.top_k
router = (0.1 * (torch.rand(E, C) - 0.5)).requires_grad_()
w1 = [(0.05 * (torch.rand(4 * C, C) - 0.5)).requires_grad_() for _ in range(E)]
b1 = [torch.zeros(4 * C, requires_grad=True) for _ in range(E)]
w2 = [(0.05 * (torch.rand(C, 4 * C) - 0.5)).requires_grad_() for _ in range(E)]
b2 = [torch.zeros(C, requires_grad=True) for _ in range(E)]
x = (2.0 * (torch.rand(N, C) - 0.5)).requires_grad_()
dy = 1e-3 * (torch.rand(N, C) - 0.5)
cap = N * K if a.capacity <= 0 else math.ceil(a.capacity * N * K / E)


def step():
    logits = x @ router.t()
    probs = torch.softmax(logits, dim=-1)
    top_p, top_i = probs.topk(K, dim=-1)
    gates = top_p / top_p.sum(-1, keepdim=True)
    # k-major priority: position of each (t, k) in its expert's queue.
    onehot = F.one_hot(top_i.t().reshape(-1), E)  # (K*N, E), k-major
    pos = (onehot.cumsum(0) - 1)[torch.arange(K * N), top_i.t().reshape(-1)]
    keep = (pos < cap).view(K, N).t()  # (N, K)
    y = torch.zeros(N, C)
    for e in range(E):
        t, k = torch.nonzero((top_i == e) & keep, as_tuple=True)
        if t.numel() == 0:
            continue
        h = F.gelu(x[t] @ w1[e].t() + b1[e], approximate="tanh")
        o = h @ w2[e].t() + b2[e]
        y = y.index_add(0, t, gates[t, k].unsqueeze(1) * o)
    f = torch.bincount(top_i.reshape(-1), minlength=E).float() / (N * K)
    aux = 1e-2 * E * (f * probs.mean(0)).sum()
    z = 1e-3 * (torch.logsumexp(logits, -1) ** 2).mean()
    loss = (y * dy).sum() + aux + z
    loss.backward()


step()
t0 = time.perf_counter()
for _ in range(a.iters):
    step()
s = time.perf_counter() - t0
print(json.dumps({"impl": "torch", "torch": torch.__version__, "tokens": N, "dim": C,
                  "experts": E, "top_k": K, "ms_per_step": 1e3 * s / a.iters,
                  "tokens_per_s": N * a.iters / s}))
