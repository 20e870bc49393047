"""strata.run(dir): a run's metrics and summary as Python objects, for notebooks.

    r = strata.run("runs/demo")
    r.summary["final_loss"], [s["loss"] for s in r.steps], r.evals[-1]["eval_loss"]

Reads <dir>/metrics.jsonl (one JSON record a line: step records carry "loss", eval records
"eval_loss") and <dir>/summary.json (written when the run ended; None while it runs), and
<dir>/config.toml's text when the run kept one.
"""
import json
import os


class Run:
    def __init__(self, directory):
        if not os.path.isdir(directory):
            raise FileNotFoundError(f"run dir {directory}: not a directory")
        self.dir = directory
        path = os.path.join(directory, "metrics.jsonl")
        if not os.path.isfile(path):
            raise FileNotFoundError(f"run dir {directory}: no metrics.jsonl (not a strata run dir)")
        self.records = []
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    self.records.append(json.loads(line))
                except json.JSONDecodeError as e:
                    # A run killed mid-write leaves its last line cut: the records before it stand.
                    if f.read().strip():
                        raise ValueError(f"{path} line {n}: not JSON ({e.msg})") from None
        summary = os.path.join(directory, "summary.json")
        self.summary = None
        if os.path.isfile(summary):
            with open(summary, encoding="utf-8") as f:
                self.summary = json.load(f)
        config = os.path.join(directory, "config.toml")
        self.config = None
        if os.path.isfile(config):
            with open(config, encoding="utf-8") as f:
                self.config = f.read()

    @property
    def steps(self):
        """The step records, in order."""
        return [r for r in self.records if "loss" in r and "step" in r]

    @property
    def evals(self):
        """The eval records, in order."""
        return [r for r in self.records if "eval_loss" in r]

    def __repr__(self):
        done = "ended" if self.summary is not None else "running or stopped"
        return f"strata.Run({self.dir!r}: {len(self.steps)} steps, {len(self.evals)} evals, {done})"


def run(directory):
    return Run(directory)
