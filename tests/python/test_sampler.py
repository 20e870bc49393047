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
                                    ("position", -1, "bad position")]:
            bad = dict(state, **{key: value})
            with self.assertRaisesRegex(ValueError, message):
                Sampler(Range(50), 2, 0, seed=1).load_state_dict(bad)
        with self.assertRaisesRegex(ValueError, "Invalid rank 2"):
            Sampler(Range(5), 2, 2)
        with self.assertRaisesRegex(ValueError, "consumed must be in"):
            s.state_dict(consumed=26)


if __name__ == "__main__":
    unittest.main()
