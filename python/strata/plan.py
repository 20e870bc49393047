"""strata.plan: the planner of `strata plan` as Python dicts.

    strata.plan.search(model="llama2-7b", gpus=64)      # what `strata plan --json` prints
    strata.plan.estimate(model="gpt2", gpus=8, tp=2, dp=4, zero=1, micro_batch=4)
    strata.plan.memory(...), strata.plan.communication(...)   # parts of that estimate

Keywords are `strata plan`'s flags without the dashes, '-' written '_' (global_batch=,
micro_batch=, gpu_mtbf_hours=, no_sp=True, ...); a keyword left out (or None) is a flag not
given. The request is built by the same C++ function the CLI uses (plan/request.h), so every
figure equals the CLI's. Unknown keywords, presets and bad values raise ValueError naming the
keyword.
"""
import json
import os
import re
import tempfile

from . import _strata

KEYWORDS = tuple(_strata.plan_keywords())


def _keyword(match):
    return match.group(1).replace("-", "_")


def search(**kwargs):
    """The whole plan: model, hardware, cluster, search counts, best (an estimate, None when
    nothing fits), ranking, explanation, compute, reliability, notes (and fits_nowhere).
    gpu= is a preset name, a GPU JSON file, or a dict of that file's fields (docs/planner.md,
    e.g. {"base": "h100-80g", "memory_gib": 70})."""
    gpu = kwargs.get("gpu")
    if isinstance(gpu, dict):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "gpu.json")
            with open(path, "w", encoding="utf-8") as f:
                json.dump(gpu, f)
            return search(**{**kwargs, "gpu": path})
    try:
        return json.loads(_strata.plan_json(kwargs))
    except ValueError as e:
        # The planner names flags (--global-batch); here they are keywords (global_batch).
        raise ValueError(re.sub(r"--([a-z][a-z0-9-]*)", _keyword, str(e))) from None


def estimate(**kwargs):
    """The estimate of the best layout among those the keywords allow (fix tp, pp, dp, cp, ep,
    zero, micro_batch and recompute for exactly one): layout, micro_batches, fits, memory,
    communication, time, pipeline, FLOPs, tokens_per_s, mfu. When none fits, the layout that
    needs the least memory (fits False)."""
    plan = search(**kwargs)
    if plan.get("best") is not None:
        return plan["best"]
    least = (plan.get("fits_nowhere") or {}).get("least_memory")
    if least is None:
        raise ValueError(f"no valid layout: {plan['search']['sample_problem']}")
    return least


def memory(**kwargs):
    """Bytes per GPU: model_states (parameters, gradients, optimizer), activations,
    comm_buffers, total, usable, and which pipeline stage is the heaviest."""
    return estimate(**kwargs)["memory"]


def communication(**kwargs):
    """Per parallel dimension: collective, group, bytes per call, calls per step, time and the
    exposed part of it."""
    return estimate(**kwargs)["communication"]


__all__ = ["search", "estimate", "memory", "communication", "KEYWORDS"]
