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

Checks. Every argument and every field of a loaded state is checked where it comes in: a
wrong type raises TypeError, a wrong value ValueError, each naming the argument or field, so
nothing fails later while iterating (the C++ side takes int64 positions and epochs).
"""
import math

from . import _strata

try:  # a torch Sampler when torch is present, so DataLoader and isinstance checks accept it
    from torch.utils.data import Sampler as _Base
except ImportError:  # pragma: no cover
    _Base = object

STATE_VERSION = 2  # 2 adds num_replicas (the world whose layout set `end`); 1 still loads

_INT64_MAX = 2**63 - 1
_MAX_REPLICAS = 2**31 - 1  # a world size is an int32 in torch.distributed


def _int(name, value, lo, hi, what="argument"):
    """`value` as an int in [lo, hi]: TypeError for a non-int (or a bool), ValueError outside."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} {name} must be an integer, got {type(value).__name__} {value!r}")
    if not lo <= value <= hi:
        raise ValueError(f"{what} {name} must be in [{lo}, {hi}], got {value!r}")
    return value


def _bool(name, value):
    if not isinstance(value, bool):
        raise TypeError(f"argument {name} must be True or False, got {type(value).__name__} {value!r}")
    return value


def _epoch_end(n, replicas, drop_last):
    """The global position an epoch of n samples ends at on `replicas` ranks."""
    return (n // replicas) * replicas if drop_last else -(-n // replicas) * replicas


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
        _int("num_replicas", num_replicas, 1, _MAX_REPLICAS)
        _int("rank", rank, 0, _INT64_MAX)
        if rank >= num_replicas:
            raise ValueError(f"Invalid rank {rank}, rank should be in the interval [0, {num_replicas - 1}]")
        _int("seed", seed, 0, 2**64 - 1)
        self.dataset = dataset
        self.n = len(dataset)
        self.num_replicas = num_replicas
        self.rank = rank
        self.shuffle = _bool("shuffle", shuffle)
        self.seed = seed
        self.drop_last = _bool("drop_last", drop_last)
        self.epoch = 0
        self._start = 0  # global position this epoch's iteration starts from
        self._end_replicas = num_replicas  # the world whose layout set _end
        self._end = self._epoch_end()  # global position the epoch ends at
        self._yielded = 0

    def _epoch_end(self):
        return _epoch_end(self.n, self.num_replicas, self.drop_last)

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
        _int("epoch", epoch, 0, _INT64_MAX)
        if epoch != self.epoch or self._start != 0:
            self.epoch = epoch
            self._start = 0
            self._end_replicas = self.num_replicas
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
        used = self._yielded if consumed is None else _int("consumed", consumed, 0, self._per_rank())
        return {"version": STATE_VERSION, "n": self.n, "seed": self.seed, "shuffle": self.shuffle,
                "drop_last": self.drop_last, "epoch": self.epoch, "num_replicas": self._end_replicas,
                "position": self._start + used * self.num_replicas, "end": self._end}

    def load_state_dict(self, state):
        """Continues from a state_dict(); raises, changing nothing, on a state that is not one
        of this sampler's (another dataset size, seed, shuffle or drop_last) or is malformed."""
        if not isinstance(state, dict) or state.get("version") not in (1, STATE_VERSION):
            raise ValueError("not a strata.data.Sampler state (missing or unknown 'version')")
        for key, mine in (("n", self.n), ("seed", self.seed), ("shuffle", self.shuffle),
                          ("drop_last", self.drop_last)):
            if key not in state:
                raise ValueError(f"sampler state has no {key!r}")
            if state[key] != mine or type(state[key]) is not type(mine):
                raise ValueError(f"sampler state is for {key}={state[key]!r}, this sampler has {key}={mine!r}")
        for key in ("epoch", "position", "end") + (("num_replicas",) if state["version"] >= 2 else ()):
            if key not in state:
                raise ValueError(f"sampler state has no {key!r}")
        epoch = _int("epoch", state["epoch"], 0, _INT64_MAX, "sampler state field")
        end = _int("end", state["end"], 0, _INT64_MAX, "sampler state field")
        if state["version"] >= 2:
            replicas = _int("num_replicas", state["num_replicas"], 1, _MAX_REPLICAS, "sampler state field")
            want = _epoch_end(self.n, replicas, self.drop_last)
            if end != want:
                raise ValueError(f"sampler state field end={end} is not where an epoch of n={self.n} ends on "
                                 f"{replicas} replicas with drop_last={self.drop_last} ({want})")
        else:  # version 1 records no world: end must be an epoch's end on at most n replicas
            replicas = self._v1_replicas(end)
        pos = _int("position", state["position"], 0, end, "sampler state field")
        self.epoch = epoch
        self._start = pos
        self._end = end
        self._end_replicas = replicas
        self._yielded = 0

    def _v1_replicas(self, end):
        """A world of at most n replicas whose epoch ends at `end` (version 1 states). Such a
        world divides `end`, so the divisors up to sqrt(end) and their pairs are the candidates."""
        n = self.n
        if n == 0 and end == 0:
            return 1
        lo, hi = ((n + 1) // 2, n) if self.drop_last else (n, 2 * n - 1)
        if lo <= end <= hi:
            for d in range(1, math.isqrt(end) + 1):
                for w in (d, end // d) if end % d == 0 else ():
                    if w <= n and _epoch_end(n, w, self.drop_last) == end:
                        return w
        raise ValueError(f"sampler state field end={end} is not where an epoch of n={n} ends on any number of "
                         f"replicas up to n with drop_last={self.drop_last} (a version 1 state records none)")
