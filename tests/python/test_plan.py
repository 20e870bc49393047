"""strata.plan against `strata plan --json` for the same arguments: the whole answer, figure for
figure, for dense, MoE, explicit-shape, fixed-layout, RLHF and does-not-fit requests; bad
arguments raise ValueError naming the keyword. Run by ctest with PYTHONPATH=<build>/python and
STRATA=<build>/strata."""
import json
import os
import subprocess
import tempfile
import unittest

import strata

STRATA = os.environ["STRATA"]

CASES = [
    {"model": "gpt2", "gpus": 8},
    {"model": "llama2-7b", "gpus": 16, "tp": 2, "pp": 2, "zero": 1, "micro_batch": 1, "recompute": "selective",
     "tokens": "2T", "gpu": "a100-80g"},
    {"layers": 24, "hidden": 2048, "heads": 16, "seq": 2048, "vocab": 50257, "global_batch": 256, "gpus": 32,
     "precision": "fp32", "zero": 3, "no_sp": True, "gpu_mtbf_hours": 20000.0, "storage_gbps": 12.5},
    {"model": "mixtral-8x7b", "gpus": 64, "ep": 8, "schedule": "interleaved", "virtual_stages": 2},
    # DeepSeek-style experts: fine-grained and shared, routing limited to 1 of 2 groups.
    {"model": "mixtral-8x7b", "gpus": 64, "ep": 8, "expert_ffn": 3584, "shared_experts": 1, "route_groups": 2,
     "route_max_groups": 1},
    {"model": "gpt2", "gpus": 8, "rlhf": True, "rollout_batch": 4},
    {"model": "gpt2", "gpus": 8, "rlhf": True, "algo": "grpo", "response_len": 128, "epochs": 2},
    {"model": "llama3-405b", "gpus": 8, "tp": 8, "dp": 1},  # fits nowhere: exit 3, the same JSON
]


def cli_args(kwargs):
    args = []
    for k, v in kwargs.items():
        flag = "--" + k.replace("_", "-")
        if v is True:
            args.append(flag)
        else:
            args += [flag, str(v)]
    return args


class PlanEqualsCli(unittest.TestCase):
    def test_every_figure_equals_strata_plan_json(self):
        for kwargs in CASES:
            with self.subTest(**kwargs):
                r = subprocess.run([STRATA, "plan", *cli_args(kwargs), "--json"], capture_output=True, text=True)
                ours = strata.plan.search(**kwargs)
                fits = ours.get("best") is not None or ours.get("rlhf", {}).get("fits", False)
                self.assertEqual(r.returncode, 0 if fits else 3, r.stderr)
                self.assertEqual(ours, json.loads(r.stdout))

    def test_estimate_memory_communication_are_the_best_layouts(self):
        kwargs = CASES[1]
        plan = strata.plan.search(**kwargs)
        self.assertEqual(plan["best"]["layout"]["tp"], 2)
        self.assertEqual(strata.plan.estimate(**kwargs), plan["best"])
        self.assertEqual(strata.plan.memory(**kwargs), plan["best"]["memory"])
        self.assertEqual(strata.plan.communication(**kwargs), plan["best"]["communication"])
        # Nothing fits: the least-memory layout, marked as not fitting.
        least = strata.plan.estimate(**CASES[-1])
        self.assertFalse(least["fits"])
        self.assertGreater(least["memory"]["total"], least["memory"]["usable"])

    def test_hardware_as_a_dict_equals_the_file(self):
        gpu = {"base": "h100-80g", "memory_gib": 40, "inter_node_gbps": 25}
        ours = strata.plan.search(model="llama2-7b", gpus=16, gpu=gpu)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "gpu.json")
            with open(path, "w") as f:
                json.dump(gpu, f)
            r = subprocess.run([STRATA, "plan", "--model", "llama2-7b", "--gpus", "16", "--gpu", path, "--json"],
                               capture_output=True, text=True)
        cli = json.loads(r.stdout)
        self.assertEqual(ours["hardware"]["memory_gib"], 40)
        for key in ("best", "ranking", "search", "compute", "reliability"):
            self.assertEqual(ours[key], cli[key], key)
        with self.assertRaisesRegex(ValueError, "memory_gib"):
            strata.plan.search(model="gpt2", gpu={"base": "h100-80g", "memory_gib": -1})

    def test_bad_arguments(self):
        for kwargs, pattern in (({"model": "gpt5"}, "unknown model preset 'gpt5' .known: gpt2"),
                                ({"model": "gpt2", "gpus": 0}, r"^gpus must be in \[1, 2\^24\] \(got 0\)"),
                                ({"model": "gpt2", "gpu": "tpu"}, "tpu"),
                                ({"model": "gpt2", "gpus": "8"}, "gpus='8': expected an integer"),
                                ({"model": "gpt2", "gpus": 8.0}, "gpus=8.0: expected an integer"),
                                ({"model": "gpt2", "no_sp": 1}, "no_sp=1: expected True or False"),
                                ({"model": "gpt2", "tp": 2 ** 40}, "tp=.*out of range"),
                                ({"model": "gpt2", "gpu_count": 8}, "unknown argument 'gpu_count'"),
                                ({"model": "gpt2", "precision": "fp8"}, "precision 'fp8' is not known"),
                                ({"model": "gpt2", "tokens": "3X"}, "tokens '3X': unknown suffix"),
                                ({"hidden": 512}, "give model PRESET .* .missing layers")):
            with self.subTest(**{k: repr(v) for k, v in kwargs.items()}):
                with self.assertRaisesRegex(ValueError, pattern):
                    strata.plan.search(**kwargs)
        self.assertIn("global_batch", strata.plan.KEYWORDS)


class TrainNames(unittest.TestCase):
    """dim= and batch=, as strata train names them; hidden= and global_batch= still work, warned."""

    def test_new_names_give_the_same_plan_as_the_old_ones_and_the_cli(self):
        new = {"layers": 24, "dim": 2048, "heads": 16, "seq": 2048, "vocab": 50257, "batch": 256, "gpus": 32}
        old = {"layers": 24, "hidden": 2048, "heads": 16, "seq": 2048, "vocab": 50257, "global_batch": 256, "gpus": 32}
        ours = strata.plan.search(**new)
        with self.assertWarnsRegex(DeprecationWarning, "hidden= is now dim="):
            self.assertEqual(strata.plan.search(**old), ours)
        r = subprocess.run([STRATA, "plan", *cli_args(new), "--json"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout), ours)
        self.assertIn("dim", strata.plan.KEYWORDS)
        self.assertIn("batch", strata.plan.KEYWORDS)

    def test_errors_name_the_keyword_as_typed(self):
        with self.assertRaisesRegex(ValueError, r"\bbatch\b") as caught:
            strata.plan.search(model="gpt2", gpus=8, batch=0)
        self.assertNotIn("global_batch", str(caught.exception))
        with self.assertRaisesRegex(ValueError, "give dim= or hidden=, not both"):
            strata.plan.search(model="gpt2", dim=512, hidden=512)


if __name__ == "__main__":
    unittest.main()
