"""Several processes (torchrun): joining the process group, and the sums a step and an evaluation
need over processes. With one process each is the identity."""

from __future__ import annotations

import datetime
import os

import torch
import torch.distributed as dist

from ..errors import BertforgeError


def distributed_setup():
    """(rank, world size, device). Under torchrun, joins the process group: NCCL on GPUs, gloo on CPU."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    local = int(os.environ.get("LOCAL_RANK", "0"))
    here = int(os.environ.get("LOCAL_WORLD_SIZE", local + 1))  # processes on this machine
    if gpus and here > gpus:  # NCCL takes one GPU a process; said by every process, before any joins
        raise BertforgeError(f"torchrun started {here} processes on this machine, which has {gpus} GPU"
                             f"{'s' * (gpus > 1)}: one a GPU (--nproc_per_node={gpus}), or CUDA_VISIBLE_DEVICES= "
                             f"to train on the CPU")
    if world > 1 and not dist.is_initialized():
        # Generous: the other processes wait while rank 0 learns a vocabulary and builds shards.
        dist.init_process_group("nccl" if gpus else "gloo", timeout=datetime.timedelta(hours=4))
    rank = dist.get_rank() if world > 1 else 0
    if gpus:
        torch.cuda.set_device(local)
        return rank, world, torch.device("cuda", local)
    return rank, world, torch.device("cpu")


def all_sum(values: dict, device) -> dict:
    """Sum each value over processes (numbers come back as Python numbers)."""
    if not (dist.is_available() and dist.is_initialized()) or not values:
        return {k: float(v) if isinstance(v, torch.Tensor) else v for k, v in values.items()}
    keys = sorted(values)
    packed = torch.tensor([float(values[k]) for k in keys], dtype=torch.float64, device=device)
    dist.all_reduce(packed)
    return {k: (int(v) if isinstance(values[k], int) else v) for k, v in zip(keys, packed.tolist())}


def host_group(world: int):
    """The process group for host numbers (the stop verdict, the step's counts): a CPU (gloo) one, so
    that summing them over processes never waits for a GPU's queue; None for a single process."""
    if world == 1:
        return None
    return dist.group.WORLD if dist.get_backend() == "gloo" else dist.new_group(backend="gloo")


def host_sum(values: dict, group) -> dict:
    """Sum integers over the processes of `group` (None: one process, nothing to do)."""
    if group is None or not values:
        return values
    keys = sorted(values)
    packed = torch.tensor([values[k] for k in keys], dtype=torch.int64)
    dist.all_reduce(packed, group=group)
    return dict(zip(keys, packed.tolist()))


def device_sum(values: dict) -> dict:
    """Sum device tensors over processes, on the device (they stay tensors: nothing waits)."""
    if not (dist.is_available() and dist.is_initialized()) or not values:
        return values
    keys = sorted(values)
    packed = torch.stack([torch.as_tensor(values[k]).float() for k in keys])
    dist.all_reduce(packed)
    return dict(zip(keys, packed.unbind()))
