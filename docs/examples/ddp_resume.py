"""A PyTorch DDP job (gloo) on strata.data.Sampler that is killed mid-epoch and resumes on
another number of processes with every sample of the epoch trained on exactly once.

    PYTHONPATH=build/python /usr/bin/python3 docs/examples/ddp_resume.py WORKDIR

Phase 1 runs 2 processes; after every step each saves its sampler state (the position is
global, so rank 0's is the job's) and the ids it trained on; the parent SIGKILLs them (with
their loaders' workers) once step 6 is saved. Phase 2 runs 3 processes from the saved state
to the end of the epoch. The parent then checks that the ids of both phases are the
dataset, each once.
"""
import json
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset

from strata.data import Sampler

N, BATCH, KILL_AFTER = 240, 4, 6  # 240 - 2 x 6 x 4 = 192 left: 64 for each of 3


class Numbers(Dataset):
    def __len__(self):
        return N

    def __getitem__(self, i):
        return i, torch.tensor([float(i % 7)]), torch.tensor([float(i % 3)])


def worker(rank, world, workdir, phase, port):
    os.setpgid(0, 0)  # the rank and its loader's workers: one group, killed together
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(1, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    sampler = Sampler(Numbers(), num_replicas=world, rank=rank, shuffle=True, seed=17)
    state_path = os.path.join(workdir, "sampler.json")
    if phase == 2:
        with open(state_path) as f:
            sampler.load_state_dict(json.load(f))
    loader = DataLoader(Numbers(), batch_size=BATCH, sampler=sampler, num_workers=2)
    seen = []
    for step, (ids, x, y) in enumerate(loader, 1):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        seen += ids.tolist()
        # The loader prefetches: say how many of this rank's samples were trained on.
        if rank == 0:
            tmp = state_path + ".tmp"
            with open(tmp, "w") as f:
                json.dump(sampler.state_dict(consumed=len(seen)), f)
            os.replace(tmp, state_path)
        with open(os.path.join(workdir, f"seen-{phase}-{rank}.json"), "w") as f:
            json.dump(seen, f)
        dist.barrier()  # every rank's step saved before the next one starts
        if phase == 1 and step == KILL_AFTER:
            open(os.path.join(workdir, f"ready-{rank}"), "w").close()
            time.sleep(3600)  # killed here, mid-epoch
    dist.destroy_process_group()


def run(world, workdir, phase, port, kill):
    # fork: each rank (and its loader's workers) starts from this process's imports; spawned,
    # every one would import torch again, seconds apiece. This process has run no torch op, so
    # no thread of it is copied half-way.
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=worker, args=(r, world, workdir, phase, port)) for r in range(world)]
    for p in procs:
        p.start()
    if kill:
        while not all(os.path.exists(os.path.join(workdir, f"ready-{r}")) for r in range(world)):
            time.sleep(0.05)
        for p in procs:
            os.killpg(p.pid, signal.SIGKILL)
    for p in procs:
        p.join()
        if not kill and p.exitcode != 0:
            sys.exit(f"phase {phase}: a worker exited with {p.exitcode}")


def main():
    workdir = sys.argv[1]
    os.makedirs(workdir, exist_ok=True)
    run(2, workdir, 1, 29511, kill=True)
    run(3, workdir, 2, 29512, kill=False)
    ids = []
    for name in sorted(os.listdir(workdir)):
        if name.startswith("seen-"):
            with open(os.path.join(workdir, name)) as f:
                ids += json.load(f)
    phase1 = sum(len(json.load(open(os.path.join(workdir, f"seen-1-{r}.json")))) for r in range(2))
    assert phase1 == 2 * KILL_AFTER * BATCH, phase1
    assert sorted(ids) == list(range(N)), "samples lost or repeated"
    print(f"killed after {phase1} samples on 2 processes, resumed on 3: all {N} samples trained on once")


if __name__ == "__main__":
    main()
