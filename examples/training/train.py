#!/usr/bin/python3
"""A small distributed training job that recovers from a fault by resuming
from its checkpoint: DDP over gloo on seeded synthetic data.

Each rank runs this program (under torchrun, or started by hand with RANK,
WORLD_SIZE, MASTER_ADDR and MASTER_PORT). Rank 0 writes a checkpoint every
--ckpt-every steps into --ckpt-dir (an emptyDir in a pod: it survives a
container restart); every rank resumes from the newest one. The data of a
step depends only on (seed, step, rank), so a run that resumes reaches the
same final loss as one that never failed.

--save-dir moves the checkpoint elsewhere (the fault marker and the log
files stay in --ckpt-dir): an emptyDir of medium Memory, say, which an
in-place restart keeps and a recreated pod does not. With --save-per-rank
every rank writes and reads its own checkpoint there (a directory each pod
has to itself), and the ranks resume from the step they all have, or from
step 0 when one has none.

A fault fires once (a marker in --ckpt-dir remembers it across restarts):
--fault-kind exit (exit with --fault-code), kill (SIGKILL itself; as a
container's PID 1 it cannot, and asks the node to, see below) or hang (sleep
forever), on --fault-rank at --fault-step.

One JSON line per step on stdout: rank, step, loss, time (Unix seconds),
attempt (the supervisor's RESTART_SUPERVISOR_RESTART_COUNT, or torchrun's
TORCHELASTIC_RESTART_COUNT). With --log-file the same lines are appended to
that file too (a file in a volume outlives the container, so a harness can
read every attempt, also of pods that were replaced).

--load-time sleeps that many seconds before the rendezvous, as a real job
loads its model and data; --ready-file is removed at the start and made
after the first step of each run, for a readiness probe that says "this rank
is training" (a queue such as Kueue counts a job's Ready pods).

The rank is RANK, or an indexed Job's JOB_COMPLETION_INDEX when RANK is not
set: one pod per rank needs no wrapper script.
"""
import argparse
import datetime
import json
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--ckpt-every", type=int, default=10)
    p.add_argument("--ckpt-dir", default=os.environ.get("CKPT_DIR", "/ckpt"))
    p.add_argument("--save-dir", default="", help="where the checkpoint is written and read (default: --ckpt-dir)")
    p.add_argument("--save-per-rank", action="store_true",
                   help="every rank writes and reads its own checkpoint in --save-dir, a directory of its own")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--timeout", type=float, default=60, help="collective timeout, seconds")
    p.add_argument("--step-time", type=float, default=0.0, help="extra seconds per step, to make steps measurable")
    p.add_argument("--fault-kind", choices=["none", "exit", "kill", "hang"], default=os.environ.get("FAULT_KIND", "none"))
    p.add_argument("--fault-rank", type=int, default=int(os.environ.get("FAULT_RANK", "1")))
    p.add_argument("--fault-step", type=int, default=int(os.environ.get("FAULT_STEP", "25")))
    p.add_argument("--fault-code", type=int, default=int(os.environ.get("FAULT_CODE", "42")))
    p.add_argument("--log-file", default=os.environ.get("LOG_FILE", ""), help="also append every line here")
    p.add_argument("--heartbeat-file", default=os.environ.get("HEARTBEAT_FILE", ""),
                   help="touched after every step: the supervisor's watchdog reads its change (docs/supervisor.md, Hangs)")
    p.add_argument("--load-time", type=float, default=0.0, help="seconds of model and data loading before the rendezvous")
    p.add_argument("--ready-file", default="", help="removed at the start, made after the run's first step")
    return p.parse_args()


LOG = None


def emit(record):
    text = json.dumps(record)
    print(text, flush=True)
    if LOG is not None:
        LOG.write(text + "\n")
        LOG.flush()


def attempt():
    for name in ("RESTART_SUPERVISOR_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT"):
        if name in os.environ:
            return int(os.environ[name])
    return 0


def start_time():
    """This process's start time in clock ticks since boot (/proc/self/stat
    field 22), the same in every PID namespace."""
    with open("/proc/self/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[19])


def batch(seed, step, rank, n=32, d=16):
    g = torch.Generator().manual_seed(seed * 1_000_003 + step * 101 + rank)
    x = torch.randn(n, d, generator=g)
    w = torch.arange(1, d + 1, dtype=torch.float32) / d
    y = (x @ w).unsqueeze(1) + 0.01 * torch.randn(n, 1, generator=g)
    return x, y


def save(path, step, model, opt):
    tmp = path + ".tmp"
    torch.save({"step": step, "model": model.state_dict(), "opt": opt.state_dict()}, tmp)
    os.replace(tmp, path)


def main():
    global LOG
    a = parse()
    rank = int(os.environ.get("RANK", os.environ.get("JOB_COMPLETION_INDEX", "0")))
    world = int(os.environ["WORLD_SIZE"])
    if a.log_file:
        LOG = open(a.log_file.replace("{rank}", str(rank)), "a")
    if a.ready_file and os.path.lexists(a.ready_file):
        os.unlink(a.ready_file)
    if a.load_time:
        time.sleep(a.load_time)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=a.timeout))
    torch.manual_seed(a.seed)
    model = DDP(torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    os.makedirs(a.ckpt_dir, exist_ok=True)
    save_dir = a.save_dir or a.ckpt_dir
    os.makedirs(save_dir, exist_ok=True)
    ckpt = os.path.join(save_dir, "checkpoint-rank%d.pt" % rank if a.save_per_rank else "checkpoint.pt")
    start = 0
    state = torch.load(ckpt) if os.path.exists(ckpt) else None
    if a.save_per_rank:
        # Each rank has only its own checkpoint (a pod that was recreated
        # has none): resume from the oldest step of any rank.
        agreed = torch.tensor([state["step"] if state is not None else 0])
        dist.all_reduce(agreed, op=dist.ReduceOp.MIN)
        if state is not None and state["step"] != agreed.item():
            if agreed.item() != 0:
                sys.exit("rank %d: a checkpoint of step %d, the ranks' oldest is of step %d" % (rank, state["step"], agreed.item()))
            state = None
    if state is not None:
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["step"]
    env = {k: v for k, v in os.environ.items() if k.startswith("RESTART_SUPERVISOR_") and k != "RESTART_SUPERVISOR_CONFIG"}
    emit({"rank": rank, "event": "start", "resumeFrom": start, "attempt": attempt(), "time": time.time(), "env": env})
    marker = os.path.join(a.ckpt_dir, "fault-done-rank%d" % a.fault_rank)
    loss = None
    for step in range(start + 1, a.steps + 1):
        if a.fault_kind != "none" and rank == a.fault_rank and step == a.fault_step and not os.path.exists(marker):
            open(marker, "w").close()
            emit({"rank": rank, "event": "fault", "kind": a.fault_kind, "step": step, "time": time.time()})
            if a.fault_kind == "exit":
                os._exit(a.fault_code)
            if a.fault_kind == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
                # Still here: this is PID 1 of its PID namespace (a
                # container with no init), and the kernel drops a signal
                # to its init from inside the namespace unless the init
                # handles it, which no process can do for SIGKILL. Ask the
                # node instead: the line names this process by its start
                # time, which reads the same from every PID namespace, and
                # the harness (test/e2e) SIGKILLs it from outside, as the
                # OOM killer or a node-level kill would.
                emit({"rank": rank, "event": "kill-me", "startTime": start_time(), "time": time.time()})
            while True:
                time.sleep(3600)
        x, y = batch(a.seed, step, rank)
        opt.zero_grad()
        out = torch.nn.functional.mse_loss(model(x), y)
        out.backward()
        opt.step()
        loss = out.item()
        if a.step_time:
            time.sleep(a.step_time)
        emit({"rank": rank, "step": step, "loss": loss, "time": time.time(), "attempt": attempt()})
        if a.heartbeat_file:
            with open(a.heartbeat_file, "a"):
                os.utime(a.heartbeat_file)
        if a.ready_file and step == start + 1:
            open(a.ready_file, "w").close()
        if step % a.ckpt_every == 0:
            if rank == 0 or a.save_per_rank:
                save(ckpt, step, model.module, opt)
            dist.barrier()
    # The final loss every rank agrees on: the mean over ranks of the last step's loss.
    t = torch.tensor([loss if loss is not None else float("nan")])
    dist.all_reduce(t)
    emit({"rank": rank, "event": "done", "finalLoss": t.item() / world, "time": time.time()})
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
