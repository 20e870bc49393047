"""strata from Python: the parts of the engine a PyTorch script can use.

strata.data.Sampler  a drop-in for torch.utils.data.DistributedSampler that resumes
                     mid-epoch, also on another number of replicas (docs/python.md).
strata.run(dir)      a run's metrics and summary as Python objects.
"""
from . import data  # noqa: F401
from .run import Run, run  # noqa: F401

__all__ = ["data", "run", "Run"]
