#!/usr/bin/python3
"""Independent reference for strata's Renyi-DP accountant (src/fed/accountant.*).

strata computes A_alpha of the sampled Gaussian mechanism the way the standard accountants
do (Mironov, Talwar, Zhang 2019, "Renyi Differential Privacy of the Sampled Gaussian
Mechanism": a binomial sum for integer orders, the erfc series of Section 3.3 for fractional
ones, in log space, double precision). This script computes the same quantity by a different
route, with mpmath at 30 significant digits:

  integer alpha:    A = sum_k C(alpha,k) (1-q)^(alpha-k) q^k exp((k^2-k) / (2 sigma^2))
                    summed exactly in high precision (no log-space tricks);
  fractional alpha: A = integral over z of mu0(z) ((1-q) + q mu1(z)/mu0(z))^alpha dz,
                    mu0 = N(0, sigma^2), mu1 = N(1, sigma^2), by mpmath.quad
                    (the definition, Mironov et al. 2019, Section 3).

RDP(alpha) = log(A) / (alpha - 1) per step, times the number of steps; epsilon at delta by
  classic:   min_alpha  rdp + log(1/delta) / (alpha - 1)                (Mironov 2017, Prop. 3)
  improved:  min_alpha  rdp + log((alpha-1)/alpha) - (log delta + log alpha) / (alpha - 1)
             (Balle et al. 2020, Thm. 21; what Opacus and TF-Privacy report today)

Writes tests/fed/fixtures/rdp_reference.json (regenerate: /usr/bin/python3 tools/fed/rdp_reference.py).
"""
import functools
import json
import math
import os
import sys

import mpmath as mp

mp.mp.dps = 30

# Opacus DEFAULT_ALPHAS and TF-Privacy's compute_dp_sgd_privacy orders.
ORDERS = [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64))


def log_a_int(q, sigma, alpha):
    q, s2 = mp.mpf(q), mp.mpf(sigma) ** 2
    total = mp.mpf(0)
    for k in range(alpha + 1):
        total += mp.binomial(alpha, k) * (1 - q) ** (alpha - k) * q ** k * mp.exp((k * k - k) / (2 * s2))
    return mp.log(total)


def log_a_frac(q, sigma, alpha):
    q, sigma, alpha = mp.mpf(q), mp.mpf(sigma), mp.mpf(alpha)

    def integrand(z):
        mu0 = mp.npdf(z, 0, sigma)
        ratio = mp.exp((2 * z - 1) / (2 * sigma ** 2))  # mu1(z) / mu0(z)
        return mu0 * ((1 - q) + q * ratio) ** alpha

    # The integrand's mass sits near 0 (mu0) and, for large alpha, further right; split
    # the line so quad sees each bump.
    pts = [-mp.inf, -20 * sigma, -5 * sigma, 0, 1, 5 * sigma, 20 * sigma, 60 * sigma + 5 * alpha, mp.inf]
    return mp.log(mp.quad(integrand, pts))


@functools.lru_cache(maxsize=None)
def rdp_step(q, sigma, alpha):
    if q == 1:
        return mp.mpf(alpha) / (2 * mp.mpf(sigma) ** 2)
    if float(alpha).is_integer():
        la = log_a_int(q, sigma, int(alpha))
    else:
        la = log_a_frac(q, sigma, alpha)
    return la / (mp.mpf(alpha) - 1)


def epsilon(q, sigma, steps, delta, orders, conversion):
    best, best_order = mp.inf, None
    for a in orders:
        r = steps * rdp_step(q, sigma, a)
        a = mp.mpf(a)
        if conversion == "classic":
            e = r + mp.log(1 / mp.mpf(delta)) / (a - 1)
        else:
            e = r + mp.log((a - 1) / a) - (mp.log(delta) + mp.log(a)) / (a - 1)
        if e < best:
            best, best_order = e, float(a)
    return max(float(best), 0.0), best_order


def case(name, n, batch, sigma, epochs, delta, orders, conversion, steps=None, published=None, source=None):
    q = batch / n
    if steps is None:
        steps = int(math.ceil(epochs * n / batch))
    eps, order = epsilon(q, sigma, steps, delta, orders, conversion)
    return dict(name=name, n=n, batch=batch, sigma=sigma, epochs=epochs, steps=steps, delta=delta,
                orders="integer2_33" if orders is INT_ORDERS else "default", conversion=conversion,
                epsilon=eps, order=order, published=published, source=source)


INT_ORDERS = list(range(2, 34))

if __name__ == "__main__":
    cases = []
    tfp = "TF-Privacy tutorials/README.md (MNIST, N=60000, batch 256, delta 1e-5; old compute_dp_sgd_privacy.py)"
    cases.append(case("tfp_mnist_60ep", 60000, 256, 1.1, 60, 1e-5, ORDERS, "classic", published=3.01, source=tfp))
    cases.append(case("tfp_mnist_15ep", 60000, 256, 1.3, 15, 1e-5, ORDERS, "classic", published=1.19, source=tfp))
    cases.append(case("tfp_mnist_45ep", 60000, 256, 0.7, 45, 1e-5, ORDERS, "classic", published=7.10, source=tfp))
    # Abadi et al. 2016, Section 3.1: q = 0.01, sigma = 4, delta = 1e-5, T = 10000 steps ->
    # epsilon ~ 1.26 with the moments accountant (integer moments lambda <= 32).
    cases.append(case("abadi_q001_s4", 100, 1, 4.0, None, 1e-5, INT_ORDERS, "classic", steps=10000,
                      published=1.26, source="Abadi et al. 2016, Sec. 3.1"))
    # Values with no published counterpart: the improved conversion, full-batch q = 1,
    # fractional orders dominating.
    cases.append(case("improved_mnist_60ep", 60000, 256, 1.1, 60, 1e-5, ORDERS, "improved"))
    cases.append(case("full_batch", 1000, 1000, 2.0, 10, 1e-5, ORDERS, "improved"))
    cases.append(case("high_noise", 50000, 512, 5.0, 3, 1e-6, ORDERS, "improved"))
    cases.append(case("low_noise", 1000, 100, 0.6, 5, 1e-5, ORDERS, "classic"))
    # Per-order RDP values (one step) for a direct check of the series.
    per_order = []
    for q, sigma in [(0.01, 1.1), (0.004267, 0.7), (0.1, 2.0)]:
        for a in [1.5, 2, 3.3, 8, 20.5, 32, 63]:
            per_order.append(dict(q=q, sigma=sigma, alpha=a, rdp=float(rdp_step(q, sigma, a))))
    out = dict(generator="tools/fed/rdp_reference.py (mpmath %s, %d digits)" % (mp.__version__, mp.mp.dps),
               cases=cases, per_order=per_order)
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fed", "fixtures",
                        "rdp_reference.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    for c in cases:
        print("%-22s eps=%.4f order=%s published=%s" % (c["name"], c["epsilon"], c["order"], c["published"]))
