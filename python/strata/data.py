"""strata.data.Sampler: DistributedSampler's layout, with strata's exact resume.

By default the same semantics as torch.utils.data.DistributedSampler (PyTorch 1.13): an epoch
of `len(dataset)` samples is padded by repeating its first samples (or, with drop_last, cut) to
a multiple of num_replicas, and position p of the epoch goes to rank p % num_replicas. Without
shuffling the indices are torch's, index for index; with shuffling the order is strata's own
seeded permutation (data/sampler.h: a pure function of seed and epoch, the same on every rank),
not torch's generator.

Resume. state_dict() records the epoch and the global position reached (this rank's consumed
samples times num_replicas: ranks step in lockstep). load_state_dict() continues from that
position on any number of replicas: the remaining positions are dealt round robin again, each
rank taking the same count (padded or dropped by the tail rule). Pass `consumed=` to
state_dict() when a DataLoader prefetches ahead of the training loop: the sampler cannot see
which of the indices it gave out were trained on.
"""
import math

from . import _strata

try:  # a torch Sampler when torch is present, so DataLoader and isinstance checks accept it
    from torch.utils.data import Sampler as _Base
except ImportError:  # pragma: no cover
    _Base = object

STATE_VERSION = 1


def _default_world():
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("Requires distributed package to be available and initialized, or pass num_replicas and rank")
    return dist.get_world_size(), dist.get_rank()


class Sampler(_Base):
    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0, drop_last=False):
        if num_replicas is None or rank is None:
            world, me = _default_world()
            num_replicas = world if num_replicas is None else num_replicas
            rank = me if rank is None else rank
        if not isinstance(num_replicas, int) or num_replicas < 1:
            raise ValueError(f"num_replicas must be a positive integer, got {num_replicas!r}")
        if not isinstance(rank, int) or rank < 0 or rank >= num_replicas:
            raise ValueError(f"Invalid rank {rank}, rank should be in the interval [0, {num_replicas - 1}]")
        if not isinstance(seed, int) or seed < 0 or seed >= 2**64:
            raise ValueError(f"seed must be an integer in [0, 2^64), got {seed!r}")
        self.dataset = dataset
        self.n = len(dataset)
        self.num_replicas = num_replicas
        self.rank = rank
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.epoch = 0
        self._start = 0  # global position this epoch's iteration starts from
        self._end = self._epoch_end()  # global position the epoch ends at
        self._yielded = 0

    def _epoch_end(self):
        w = self.num_replicas
        return (self.n // w) * w if self.drop_last else math.ceil(self.n / w) * w

    def _per_rank(self):
        left = max(0, self._end - self._start)
        w = self.num_replicas
        return left // w if self.drop_last else math.ceil(left / w)

    @property
    def num_samples(self):
        return self._per_rank()

    def __len__(self):
        return self._per_rank()

    def set_epoch(self, epoch):
        if not isinstance(epoch, int) or epoch < 0:
            raise ValueError(f"epoch must be a non-negative integer, got {epoch!r}")
        if epoch != self.epoch or self._start != 0:
            self.epoch = epoch
            self._start = 0
            self._end = self._epoch_end()

    def indices(self):
        """This rank's indices for the rest of the epoch, as a NumPy int64 array."""
        return _strata.rank_indices(self.n, self.num_replicas, self.rank, self.shuffle, self.seed, self.epoch,
                                    self._start, self._per_rank())

    def __iter__(self):
        self._yielded = 0
        for i in self.indices().tolist():
            self._yielded += 1
            yield i

    def state_dict(self, consumed=None):
        """The position after `consumed` of this rank's samples of the epoch (default: as many
        as the iterator has yielded)."""
        used = self._yielded if consumed is None else consumed
        if not isinstance(used, int) or used < 0 or used > self._per_rank():
            raise ValueError(f"consumed must be in [0, {self._per_rank()}], got {used!r}")
        return {"version": STATE_VERSION, "n": self.n, "seed": self.seed, "shuffle": self.shuffle,
                "drop_last": self.drop_last, "epoch": self.epoch,
                "position": self._start + used * self.num_replicas, "end": self._end}

    def load_state_dict(self, state):
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            raise ValueError("not a strata.data.Sampler state (missing or unknown 'version')")
        for key, mine in (("n", self.n), ("seed", self.seed), ("shuffle", self.shuffle)):
            if state.get(key) != mine:
                raise ValueError(f"sampler state is for {key}={state.get(key)!r}, this sampler has {key}={mine!r}")
        pos, end = state.get("position"), state.get("end")
        if not isinstance(pos, int) or not isinstance(end, int) or not 0 <= pos <= end:
            raise ValueError(f"sampler state has a bad position {pos!r} (end {end!r})")
        self.epoch = state["epoch"]
        self._start = pos
        self._end = end
        self._yielded = 0
