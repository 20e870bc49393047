"""strata.plan: the planner of `strata plan` as Python dicts.

    strata.plan.search(model="llama2-7b", gpus=64)      # what `strata plan --json` prints
    strata.plan.estimate(model="gpt2", gpus=8, tp=2, dp=4, zero=1, micro_batch=4)
    strata.plan.memory(...), strata.plan.communication(...)   # parts of that estimate

Keywords are `strata plan`'s flags without the dashes, '-' written '_' (dim=, batch=,
micro_batch=, gpu_mtbf_hours=, no_sp=True, ...), in `strata train`'s names; a keyword left out
(or None) is a flag not given. hidden= and global_batch=, the names of an earlier release, still
work for one more with a DeprecationWarning. The request is built by the same C++ function the CLI uses (plan/request.h), so every
figure equals the CLI's. Unknown keywords, presets and bad values raise ValueError naming the
keyword.
"""
import json
import os
import re
import tempfile
import warnings

from . import _strata

KEYWORDS = tuple(_strata.plan_keywords())


# Earlier names -> `strata train`'s.
RENAMED = {"hidden": "dim", "global_batch": "batch"}


def _keyword(match):
    return match.group(1).replace("-", "_")


def _as_typed(message, kwargs):
    """The planner's words for a setting (--hidden, --global-batch) as the caller typed it."""
    message = re.sub(r"--([a-z][a-z0-9-]*)", _keyword, message)
    for old, new in RENAMED.items():
        if new in kwargs:
            message = re.sub(rf"\b{old}\b", new, message)
    return message


def search(**kwargs):
    """The whole plan: model, hardware, cluster, search counts, best (an estimate, None when
    nothing fits), ranking, explanation, compute, reliability, notes (and fits_nowhere).
    gpu= is a preset name, a GPU JSON file, or a dict of that file's fields (docs/planner.md,
    e.g. {"base": "h100-80g", "memory_gib": 70})."""
    for old, new in RENAMED.items():
        if old in kwargs and new in kwargs:
            raise ValueError(f"give {new}= or {old}=, not both ({old}= is the earlier name of {new}=)")
        if old in kwargs and kwargs[old] is not None:
            warnings.warn(f"strata.plan: {old}= is now {new}=, as strata train names it", DeprecationWarning,
                          stacklevel=2)
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
        # The planner names flags (--global-batch); here they are keywords (batch).
        raise ValueError(_as_typed(str(e), kwargs)) from None


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
