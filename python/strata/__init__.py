"""strata from Python: the parts of the engine a PyTorch script can use.

strata.data.Sampler  a drop-in for torch.utils.data.DistributedSampler that resumes
                     mid-epoch, also on another number of replicas (docs/python.md).
"""
from . import data  # noqa: F401

__all__ = ["data"]
