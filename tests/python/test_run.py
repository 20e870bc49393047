"""strata.run(dir) over a real run of the built binary. Run by ctest with
PYTHONPATH=<build>/python and STRATA=<build>/strata."""
import json
import os
import subprocess
import tempfile
import unittest

import strata


class RunDir(unittest.TestCase):
    def test_reads_what_train_wrote(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "run")
            subprocess.run([os.environ["STRATA"], "train", "--model", "tiny", "--steps", "4", "--seq", "16",
                            "--batch", "4", "--eval-every", "2", "--sample-tokens", "0", "--run-dir", out],
                           check=True, capture_output=True)
            r = strata.run(out)
            self.assertEqual([s["step"] for s in r.steps], [1, 2, 3, 4])
            self.assertEqual(len(r.evals), 2)
            self.assertEqual(r.summary["final_loss"], r.steps[-1]["loss"])
            self.assertIn("steps = 4", r.config)
            self.assertIn("4 steps, 2 evals, ended", repr(r))
            # A record cut by a kill is dropped; damage before the end is named by line.
            with open(os.path.join(out, "metrics.jsonl"), "a") as f:
                f.write('{"step": 5, "lo')
            self.assertEqual(len(strata.run(out).steps), 4)
            lines = open(os.path.join(out, "metrics.jsonl")).read().splitlines()
            lines[1] = "garbage"
            with open(os.path.join(out, "metrics.jsonl"), "w") as f:
                f.write("\n".join(lines[:-1]) + "\n")
            with self.assertRaisesRegex(ValueError, "metrics.jsonl line 2: not JSON"):
                strata.run(out)

    def test_not_a_run_dir(self):
        with tempfile.TemporaryDirectory() as d:
            with self.assertRaisesRegex(FileNotFoundError, "no metrics.jsonl"):
                strata.run(d)
            with self.assertRaisesRegex(FileNotFoundError, "not a directory"):
                strata.run(os.path.join(d, "nope"))


if __name__ == "__main__":
    unittest.main()
