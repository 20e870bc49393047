"""strata from Python: the parts of the engine a PyTorch script can use.

strata.data.Sampler  a drop-in for torch.utils.data.DistributedSampler that resumes
                     mid-epoch, also on another number of replicas (docs/python.md).
strata.ckpt          a run's checkpoints: list them, read any tensor of any layout as a
                     NumPy array or torch tensor, export a Hugging Face GPT-2.
strata.plan          the planner's memory, communication and layout search as dicts.
strata.run(dir)      a run's metrics and summary as Python objects.
"""
from . import ckpt, data, plan  # noqa: F401
from .run import Run, run  # noqa: F401

__all__ = ["ckpt", "data", "plan", "run", "Run"]
