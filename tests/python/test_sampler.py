"""strata.data.Sampler against torch.utils.data.DistributedSampler (PyTorch from Debian), and
its resume on another number of replicas. Run by ctest with PYTHONPATH=<build>/python."""
import itertools
import unittest

import torch
from torch.utils.data import DataLoader, DistributedSampler

from strata.data import Sampler


class Range(torch.utils.data.Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return i


SIZES = [1, 2, 7, 10, 33, 100, 101]
WORLDS = [1, 2, 3, 4, 8]


class Parity(unittest.TestCase):
    def test_without_shuffle_the_indices_are_torchs(self):
        for n, w, drop_last, seed in itertools.product(SIZES, WORLDS, [False, True], [0, 7]):
            for r in range(w):
                ref = list(DistributedSampler(Range(n), w, r, shuffle=False, seed=seed, drop_last=drop_last))
                s = Sampler(Range(n), w, r, shuffle=False, seed=seed, drop_last=drop_last)
                self.assertEqual(list(s), ref, (n, w, r, drop_last))
                self.assertEqual(len(s), len(ref))

    def test_with_shuffle_the_layout_is_torchs(self):
        for n, w, drop_last in itertools.product(SIZES, WORLDS, [False, True]):
            ours = [list(Sampler(Range(n), w, r, shuffle=True, seed=3, drop_last=drop_last)) for r in range(w)]
            ref = [list(DistributedSampler(Range(n), w, r, shuffle=True, seed=3, drop_last=drop_last)) for r in range(w)]
            self.assertEqual([len(x) for x in ours], [len(x) for x in ref], (n, w, drop_last))
            flat = [i for x in ours for i in x]
            pad = sum(len(x) for x in ref) - min(n, sum(len(x) for x in ref))
            # disjoint apart from the padding, which repeats samples as torch's does
            self.assertEqual(len(flat) - len(set(flat)), pad, (n, w, drop_last))
            if not drop_last:
                self.assertEqual(set(flat), set(range(n)))

    def test_epochs_and_seeds(self):
        a = Sampler(Range(1000), 2, 0, seed=1)
        first = list(a)
        self.assertEqual(first, list(Sampler(Range(1000), 2, 0, seed=1)))  # same seed, same order
        self.assertNotEqual(first, list(Sampler(Range(1000), 2, 0, seed=2)))
        a.set_epoch(1)
        self.assertNotEqual(list(a), first)
        self.assertNotEqual(first, list(range(0, 1000, 2)))

    def test_with_a_dataloader_and_workers(self):
        s = Sampler(Range(101), 3, 1, seed=9)
        got = [int(i) for batch in DataLoader(Range(101), batch_size=4, sampler=s, num_workers=2) for i in batch]
        self.assertEqual(got, list(s))


class Resume(unittest.TestCase):
    def run_epoch_killed_and_resumed(self, n, before, after, steps_before, shuffle=True):
        seen = []
        samplers = [Sampler(Range(n), before, r, shuffle=shuffle, seed=4) for r in range(before)]
        for s in samplers:
            seen += list(s)[:steps_before]
        state = samplers[0].state_dict(consumed=steps_before)
        for r in range(after):
            s = Sampler(Range(n), after, r, shuffle=shuffle, seed=4)
            s.load_state_dict(state)
            seen += list(s)
        return seen

    def test_every_sample_once_on_another_world_size(self):
        # The rest of the epoch divides among the new ranks: every sample exactly once.
        for before, after, steps in [(2, 3, 6), (3, 2, 6), (4, 1, 5), (1, 4, 8), (2, 2, 7)]:
            seen = self.run_epoch_killed_and_resumed(120, before, after, steps)
            self.assertEqual(sorted(seen), list(range(120)), (before, after))
        # It does not: padded as DistributedSampler pads, so every sample at least once and
        # fewer than `after` repeats.
        seen = self.run_epoch_killed_and_resumed(120, 2, 3, 7)
        self.assertEqual(set(seen), set(range(120)))
        self.assertEqual(len(seen) - 120, 2)

    def test_state_survives_iteration_count(self):
        s = Sampler(Range(50), 2, 0, seed=1)
        it = iter(s)
        for _ in range(5):
            next(it)
        self.assertEqual(s.state_dict()["position"], 10)
        t = Sampler(Range(50), 2, 0, seed=1)
        t.load_state_dict(s.state_dict())
        self.assertEqual(list(t), list(s)[5:])

    def test_bad_states_are_refused(self):
        s = Sampler(Range(50), 2, 0, seed=1)
        state = s.state_dict()
        for key, value, message in [("n", 51, "n=51"), ("seed", 2, "seed=2"), ("version", 9, "version"),
                                    ("position", -1, "position must be in")]:
            bad = dict(state, **{key: value})
            with self.assertRaisesRegex(ValueError, message):
                Sampler(Range(50), 2, 0, seed=1).load_state_dict(bad)
        with self.assertRaisesRegex(ValueError, "Invalid rank 2"):
            Sampler(Range(5), 2, 2)
        with self.assertRaisesRegex(ValueError, "consumed must be in"):
            s.state_dict(consumed=26)


class Checks(unittest.TestCase):
    """Every argument and state field is checked where it comes in, by name: nothing fails
    later while iterating, and a refused state changes nothing."""

    def refused(self, sampler, state, error, message):
        before = (list(sampler), len(sampler), sampler.state_dict())
        with self.assertRaisesRegex(error, message):
            sampler.load_state_dict(state)
        self.assertEqual((list(sampler), len(sampler), sampler.state_dict()), before)

    def test_state_fields_are_checked_on_load(self):
        state = Sampler(Range(10), 2, 0, seed=1).state_dict()
        cases = [("end", 40, ValueError, "end=40 is not where an epoch of n=10 ends on 2 replicas"),
                 ("end", 10**18, ValueError, "end=1000000000000000000 is not where"),
                 ("end", 2**64, ValueError, "field end must be in"),
                 ("end", "10", TypeError, "field end must be an integer, got str"),
                 ("epoch", -5, ValueError, "field epoch must be in \\[0, "),
                 ("epoch", 2**63, ValueError, "field epoch must be in"),
                 ("epoch", "x", TypeError, "field epoch must be an integer, got str 'x'"),
                 ("epoch", 1.5, TypeError, "field epoch must be an integer, got float 1.5"),
                 ("epoch", True, TypeError, "field epoch must be an integer, got bool"),
                 ("position", 11, ValueError, "field position must be in \\[0, 10\\]"),
                 ("position", 2.0, TypeError, "field position must be an integer"),
                 ("num_replicas", 0, ValueError, "field num_replicas must be in"),
                 ("num_replicas", 3, ValueError, "end=10 is not where an epoch of n=10 ends on 3 replicas"),
                 ("num_replicas", None, TypeError, "field num_replicas must be an integer"),
                 ("drop_last", True, ValueError, "state is for drop_last=True, this sampler has drop_last=False"),
                 ("shuffle", 1, ValueError, "state is for shuffle=1")]
        for key, value, error, message in cases:
            with self.subTest(key=key, value=value):
                self.refused(Sampler(Range(10), 2, 0, seed=1), dict(state, **{key: value}), error, message)
        for key in ("epoch", "position", "end", "num_replicas", "drop_last"):
            self.refused(Sampler(Range(10), 2, 0, seed=1), {k: v for k, v in state.items() if k != key},
                         ValueError, f"has no '{key}'")

    def test_a_state_of_more_replicas_than_samples_resumes(self):
        # 40 replicas over 10 samples: DistributedSampler pads to 40 positions, each sample 4 times.
        big = Sampler(Range(10), 40, 0, shuffle=False)
        state = big.state_dict(consumed=0)
        self.assertEqual((state["end"], state["num_replicas"]), (40, 40))
        seen = []
        for r in range(2):
            s = Sampler(Range(10), 2, r, shuffle=False)
            s.load_state_dict(state)
            seen += list(s)
        self.assertEqual(sorted(seen), sorted(list(range(10)) * 4))

    def test_version_1_states_still_load(self):
        # Saved before num_replicas was recorded: 3 replicas over 100 samples end at 102.
        old = {"version": 1, "n": 100, "seed": 4, "shuffle": True, "drop_last": False, "epoch": 2,
               "position": 30, "end": 102}
        s = Sampler(Range(100), 2, 1, seed=4)
        s.load_state_dict(old)
        self.assertEqual(len(s), 36)
        again = Sampler(Range(100), 2, 1, seed=4)
        again.load_state_dict(s.state_dict(consumed=0))  # saved as version 2: a world ending at 102
        self.assertEqual(list(again), list(s))
        for end in (40 * 100, 2 * 100, 99):
            self.refused(Sampler(Range(100), 2, 1, seed=4), dict(old, end=end), ValueError,
                         f"end={end} is not where an epoch of n=100 ends on any number of replicas up to n")
        d = Sampler(Range(100), 2, 1, seed=4, drop_last=True)
        d.load_state_dict(dict(old, drop_last=True, end=99))  # 3 or 33 replicas
        self.refused(d, dict(old, drop_last=True, end=49), ValueError, "end=49 is not where")

    def test_arguments_are_checked_by_name(self):
        for kwargs, error, message in [
                (dict(shuffle="no"), TypeError, "shuffle must be True or False, got str 'no'"),
                (dict(drop_last=1), TypeError, "drop_last must be True or False, got int 1"),
                (dict(num_replicas=2**63), ValueError, "num_replicas must be in \\[1, 2147483647\\]"),
                (dict(num_replicas="2"), TypeError, "num_replicas must be an integer, got str"),
                (dict(num_replicas=2.0), TypeError, "num_replicas must be an integer, got float"),
                (dict(rank=-1), ValueError, "rank must be in"),
                (dict(seed=2**64), ValueError, "seed must be in"),
                (dict(seed="0"), TypeError, "seed must be an integer")]:
            with self.subTest(kwargs=kwargs), self.assertRaisesRegex(error, message):
                Sampler(Range(10), **dict(dict(num_replicas=2, rank=0), **kwargs))
        s = Sampler(Range(10), 2, 0)
        with self.assertRaisesRegex(ValueError, "epoch must be in \\[0, 9223372036854775807\\], got 18446744073709551616"):
            s.set_epoch(2**64)
        with self.assertRaisesRegex(TypeError, "epoch must be an integer, got float"):
            s.set_epoch(1.5)
        with self.assertRaisesRegex(TypeError, "consumed must be an integer"):
            s.state_dict(consumed="3")
        s.set_epoch(2**63 - 1)  # the largest epoch iterates
        self.assertEqual(len(list(s)), 5)


if __name__ == "__main__":
    unittest.main()
