"""Measured recovery: one fault per scenario, restarted from disk and from in-memory copies.

Scenarios (each run under the supervisor, `--max-restarts 1`; the fault is dealt by this
driver once rank 0 has recorded step FAULT - 1, so its time is known):
  kill   rank 1 of 2 (one host) SIGKILLed
  stop   rank 1 of 2 (one host) SIGSTOPped: nothing fails until rank 0's communication
         watchdog (--timeout) fires and rank 0 exits; the supervisor then stops the job
  hang   rank 1 of 2 (one host) hangs as step FAULT starts (`--inject hang`: asleep in pause(),
         neither dead nor stopped; the fault's time is rank 0's record of step FAULT - 1):
         rank 0's watchdog (--timeout) fires; restarts stop the job and start it again, live
         recovery kills the rank that did not say its world broke half a --timeout later
  replica  rank 1 of a tp 2 x dp 2 job (4 ranks, one host) SIGKILLed: under shrink and live
         its whole data-parallel replica (ranks 0 and 1) goes, and live brings back a replica
         of 2 replacements
  host   a whole namespace host lost: 2 hosts x 2 ranks over MPI (tools/netns-cluster, each
         host with its own /dev/shm), every process of host 1 SIGKILLed (mpirun's daemon too);
         `--elastic` restarts on host 0
Modes, side by side in the same invocation (alternated, REPEATS times):
  disk    --ckpt-every CKPT
  memory  --ckpt-every CKPT --mem-ckpt-every 1
  replicas --ckpt-every CKPT --mem-ckpt-every 1 --mem-ckpt-replicas 1 (host only: each copy
          also on the next host, so the --elastic restart resumes from memory)
  shrink  --ckpt-every CKPT --mem-ckpt-every 1 --recovery shrink: the survivors continue in
          their own processes on fewer ranks (kill and stop: a stopped rank is killed by the
          launcher once a survivor's watchdog fired; host: over the tcp backend, OpenMPI
          cannot shrink a communicator, with --mem-ckpt-replicas 1 so that the lost host's
          copies are on the surviving one)
  live    the same with --recovery live: a replacement then starts (on the dead rank's host)
          and joins at a step boundary, back at the world's size
  shrink-tcp, live-tcp  shrink and live over the tcp backend (kill and stop, one host)
Figures, all from the run's own output, each line time-stamped as it arrives:
  detect      the fault -> the supervisor's "restart 1/1" line (live: the launcher's "live
              recovery" line)
  first step  the fault -> the first step record after the restart
  steps lost  the last step recorded before the restart - the step the restart resumed at
  back        the fault -> the first step record at or past the step reached before it
  full speed  the fault -> the first step after the restart from which 3 steps in a row take
              at most 1.25x the median step time before the fault ("-" when never in the run)
  rejoined    live: the fault -> the first step record after the replacement joined (the
              world back at its size; "-" when it did not join before the run ended)
Prints the machine, the flags and the load average, then one table per scenario; writes
every figure to OUT/recovery.json.
"""
import argparse
import datetime
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time


def machine_line():
    info = open("/proc/cpuinfo").read()
    cpu = next((l.split(":", 1)[1].strip() for l in info.splitlines() if l.startswith("model name")), "?")
    flags = next((l.split(":", 1)[1].split() for l in info.splitlines() if l.startswith("flags")), [])
    feats = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_tile") if f in flags]
    return (f"{cpu}, {os.cpu_count()} cores ({' '.join(feats)}); load average "
            f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}; {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC; "
            f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}")


def children(pid):
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = open(f"/proc/{d}/stat").read()
            ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        except (OSError, ValueError):
            continue
        if ppid == pid:
            out.append(int(d))
    return out


def rank_pid(launcher, rank):
    """The forked rank `rank` of a single-host `strata train --nproc` launcher."""
    for p in children(launcher):
        try:
            env = open(f"/proc/{p}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if f"STRATA_RANK={rank}".encode() in env:
            return p
    raise RuntimeError(f"rank {rank} of launcher {launcher} not found")


def run_one(cmd, env, fault, fault_step, log_path, limit_s):
    """Runs cmd, dealing `fault` (a function of the launcher's pid) once step fault_step - 1
    is recorded. Returns the time-stamped lines and the fault's time."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True,
                         start_new_session=True)
    lines, t_fault = [], None
    deadline = time.monotonic() + limit_s
    with open(log_path, "w") as log:
        for line in p.stdout:
            t = time.monotonic()
            lines.append((t, line.rstrip("\n")))
            log.write(f"{t:.6f}\t{line}")
            if t_fault is None and line.startswith("{"):
                try:
                    j = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if j.get("step") == fault_step - 1 and "loss" in j:
                    fault(p.pid)
                    t_fault = time.monotonic()
                    log.write(f"{t_fault:.6f}\t# fault dealt\n")
            if t > deadline:
                os.killpg(p.pid, signal.SIGKILL)
                break
    p.wait()
    return lines, t_fault, p.returncode


def figures(lines, t_fault):
    steps = []
    t_restart = resumed = t_join = None
    for t, l in lines:
        joins = "live recovery: a replacement for rank" in l or "live recovery: replacements for ranks" in l
        if joins and "strata train:" in l and t_join is None:
            t_join = t
        if ("strata launch: restart 1/1" in l or "; live recovery: the job goes on" in l) and t_restart is None:
            t_restart = t
        m = re.search(r"(?:resuming|rank\(s\)) from (?:the in-memory cop(?:y|ies) of )?step (\d+)", l)
        if m and resumed is None:
            resumed = int(m.group(1))
            source = "memory" if "in-memory cop" in l else "disk"
        if l.startswith("{"):
            try:
                j = json.loads(l)
            except json.JSONDecodeError:
                continue
            if "loss" in j and "ms" in j:
                steps.append((t, j["step"], j["ms"]))
    if t_fault is None or t_restart is None:
        return None
    before = [s for s in steps if s[0] < t_restart]
    after = [s for s in steps if s[0] > t_restart]
    reached = before[-1][1]
    if resumed is None:  # a restart that found nothing resumes at step 0
        resumed, source = after[0][1] - 1, "none"
    med = statistics.median(s[2] for s in before)
    full = None
    for i in range(len(after) - 2):
        if all(after[i + k][2] <= 1.25 * med for k in range(3)):
            full = after[i][0] - t_fault
            break
    back = next((t for t, st, _ in after if st >= reached), None)
    joined = next((t for t, _, _ in after if t_join is not None and t > t_join), None)
    return {
        "detect_s": t_restart - t_fault,
        "first_step_s": after[0][0] - t_fault,
        "steps_lost": reached - resumed,
        "resumed_from": f"{source} step {resumed}",
        "back_s": back - t_fault if back else None,
        "full_speed_s": full,
        "rejoined_s": joined - t_fault if joined else None,
        "median_ms_before": med,
        "median_ms_after": statistics.median(s[2] for s in after),
    }


def cluster(tool, name, action, extra=()):
    subprocess.run([tool, action, "--name", name, *extra], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.STDOUT if action == "down" else None, timeout=120)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--strata", required=True)
    ap.add_argument("--root", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--scenarios", default="kill,stop,host")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--fault-step", type=int, default=18)
    ap.add_argument("--ckpt-every", type=int, default=10)
    ap.add_argument("--timeout", type=float, default=3, help="the watchdog of the stop scenario")
    ap.add_argument("--model", default="--model tiny --seq 64 --batch 8")
    ap.add_argument("--modes", default="disk,memory,shrink,live")
    a = ap.parse_args()

    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"),
               OMPI_MCA_mpi_yield_when_idle="1", STRATA_MPI_FINALIZE_TIMEOUT="3")
    base = [a.strata, "train", *a.model.split(), "--steps", str(a.steps), "--threads", "1",
            "--sample-tokens", "0", "--eval-every", "0", "--eval-batches", "1", "--peak-gflops", "100",
            "--json", "--max-restarts", "1", "--zero", "1", "--ckpt-every", str(a.ckpt_every)]
    modes = {"disk": [], "memory": ["--mem-ckpt-every", "1"],
             "shrink": ["--mem-ckpt-every", "1", "--recovery", "shrink"],
             "live": ["--mem-ckpt-every", "1", "--recovery", "live"],
             "replicas": ["--mem-ckpt-every", "1", "--mem-ckpt-replicas", "1"],
             # Live recovery over the tcp backend on one host (kill and stop): beside shm's.
             "shrink-tcp": ["--mem-ckpt-every", "1", "--recovery", "shrink", "--backend", "tcp"],
             "live-tcp": ["--mem-ckpt-every", "1", "--recovery", "live", "--backend", "tcp"]}
    modes = {m: modes[m] for m in a.modes.split(",")}
    tool = os.path.join(a.root, "tools", "netns-cluster")
    name = f"rcv{os.getpid() % 100000}"
    state = f"/tmp/netns-cluster-{name}"
    scenarios = a.scenarios.split(",")
    load_before = os.getloadavg()[0]
    results = {}
    try:
        if "host" in scenarios:
            cluster(tool, name, "up", ["--hosts", "2", "--ranks-per-host", "2", "--link", "1gbit", "--private-shm"])
        for sc in scenarios:
            for r in range(a.repeats):
                for mode, extra in modes.items():
                    if mode == "replicas" and sc != "host":  # a copy on another host: host only
                        continue
                    if mode.endswith("-tcp") and sc == "host":  # shrink and live run over tcp there
                        continue
                    run_dir = os.path.join(a.out, f"{sc}_{mode}_{r}")
                    if sc == "host":
                        # 4 ranks; a batch that splits over 3 and 2 as well (a live world shrinks).
                        cmd = [re.sub(r"^\d+$", "12", x) if i > 0 and base[i - 1] == "--batch" else x
                               for i, x in enumerate(base)]
                        cmd += ["--hostfile", f"{state}/hostfile", "--rsh-agent", f"{state}/rsh-agent",
                                "--elastic", "--timeout", "20"]
                        if mode in ("shrink", "live"):  # OpenMPI cannot shrink: strata's tcp backend
                            cmd += ["--backend", "tcp", "--mem-ckpt-replicas", "1"]
                        def fault(_launcher):
                            pids = subprocess.run(["ip", "netns", "pids", f"{name}-h1"], capture_output=True,
                                                  text=True).stdout.split()
                            for pid in pids:
                                try:
                                    os.kill(int(pid), signal.SIGKILL)
                                except ProcessLookupError:
                                    pass
                    elif sc == "hang":
                        cmd = base + ["--nproc", "2", "--timeout", str(a.timeout), "--inject", "hang",
                                      "--inject-rank", "1", "--inject-step", str(a.fault_step)]
                        def fault(_launcher):
                            pass
                    elif sc == "replica":
                        cmd = base + ["--nproc", "4", "--tp", "2", "--timeout", "30"]
                        def fault(launcher):
                            os.kill(rank_pid(launcher, 1), signal.SIGKILL)
                    else:
                        cmd = base + ["--nproc", "2", "--timeout", str(a.timeout if sc == "stop" else 30)]
                        sig = signal.SIGSTOP if sc == "stop" else signal.SIGKILL
                        def fault(launcher, sig=sig):
                            os.kill(rank_pid(launcher, 1), sig)
                    cmd += ["--run-dir", run_dir] + extra
                    lines, t_fault, rc = run_one(cmd, env, fault, a.fault_step, run_dir + ".log", 300)
                    f = figures(lines, t_fault)
                    if f is None or rc != 0:
                        print(f"{sc} {mode}: no recovery (exit {rc}); see {run_dir}.log", file=sys.stderr)
                        print("\n".join(l for _, l in lines[-15:]), file=sys.stderr)
                    else:
                        results.setdefault(sc, {}).setdefault(mode, []).append(f)
                    print(f"{sc} {mode} {r + 1}/{a.repeats} done", file=sys.stderr)
    finally:
        if "host" in scenarios:
            cluster(tool, name, "down")

    print(f"machine: {machine_line()} (load average {load_before:.1f} at the start)")
    print(f"model: {a.model}; --steps {a.steps}, fault after step {a.fault_step - 1}, --ckpt-every "
          f"{a.ckpt_every}, --max-restarts 1, --zero 1; stop: --timeout {a.timeout}")
    what = {"kill": "one rank of 2 SIGKILLed (one host)",
            "hang": f"one rank of 2 hung (--inject hang) until the watchdog (--timeout {a.timeout}) fires",
            "replica": "rank 1 of tp 2 x dp 2 SIGKILLed (one host; shrink and live: its replica of 2 goes)",
            "stop": f"one rank of 2 SIGSTOPped until the watchdog (--timeout {a.timeout}) fires",
            "host": "a whole namespace host of 2 lost (2 x 2 ranks, --batch 12; disk, memory, replicas: MPI "
                    "and --elastic; shrink, live: tcp with replicas)"}
    def cell(v, fmt="{:.2f}"):
        return "-" if v is None else fmt.format(v)
    for sc in scenarios:
        print(f"\n{what[sc]}: median over {a.repeats} run(s)")
        print(f"  {'restart from':12} {'detect s':>9} {'first step s':>13} {'steps lost':>11} {'back s':>8} "
              f"{'full speed s':>13} {'rejoined s':>11} {'step ms':>8}  resumed from")
        for mode in modes:
            rows = results.get(sc, {}).get(mode, [])
            if not rows:
                print(f"  {mode:12} (no recovery; see the logs)")
                continue
            med = lambda k: statistics.median(x[k] for x in rows) if all(x[k] is not None for x in rows) else None
            print(f"  {mode:12} {cell(med('detect_s')):>9} {cell(med('first_step_s')):>13} "
                  f"{cell(med('steps_lost'), '{:.0f}'):>11} {cell(med('back_s')):>8} {cell(med('full_speed_s')):>13} {cell(med('rejoined_s')):>11} {cell(med('median_ms_before'), '{:.0f}'):>8}  "
                  f"{', '.join(x['resumed_from'] for x in rows)}")
    with open(os.path.join(a.out, "recovery.json"), "w") as f:
        json.dump({"machine": machine_line(), "args": vars(a), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
