"""Which rank and device a process takes under torchrun, on one machine or several: the global rank
(RANK, as the process group reports it) picks the rows and whether the process writes; the rank on
its machine (LOCAL_RANK) picks its GPU. Decided without a process group or a GPU."""

import pytest
import torch

from bertforge.errors import BertforgeError
from bertforge.training import distributed


@pytest.fixture
def fake_group(monkeypatch):
    """torch.distributed and torch.cuda replaced by recorders; returns what they were asked."""
    calls = {}
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: "backend" in calls)
    monkeypatch.setattr(distributed.dist, "init_process_group",
                        lambda backend, timeout=None: calls.update(backend=backend))
    monkeypatch.setattr(distributed.dist, "get_rank", lambda: int(calls["env"]["RANK"]))
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: calls.update(cuda=device))

    def launch(gpus: int, **env):
        calls.clear()
        calls["env"] = env
        for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
            monkeypatch.delenv(name, raising=False)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
        return distributed.distributed_setup(), calls

    return launch


def test_second_machine_second_process_takes_its_local_gpu_and_its_global_rows(fake_group):
    # torchrun --nnodes=2 --nproc_per_node=2: the second process of the second machine
    (rank, world, device), calls = fake_group(2, WORLD_SIZE="4", RANK="3", LOCAL_RANK="1",
                                             LOCAL_WORLD_SIZE="2")
    assert (rank, world) == (3, 4)  # rows 3, 7, 11, ... of each global batch; not the writer
    assert device == torch.device("cuda", 1) and calls["cuda"] == 1  # its machine has GPUs 0 and 1 only
    assert calls["backend"] == "nccl"


def test_cpu_processes_join_with_gloo_and_single_runs_join_nothing(fake_group):
    (rank, world, device), calls = fake_group(0, WORLD_SIZE="4", RANK="2", LOCAL_RANK="0")
    assert (rank, world, device) == (2, 4, torch.device("cpu"))
    assert calls["backend"] == "gloo" and "cuda" not in calls
    (rank, world, device), calls = fake_group(1)  # no torchrun: one process, the first GPU
    assert (rank, world, device) == (0, 1, torch.device("cuda", 0)) and "backend" not in calls


def test_more_processes_than_gpus_is_said_before_any_process_joins(fake_group):
    # torchrun --nproc_per_node=2 on a machine with one GPU: NCCL would fail far from the cause
    for local in ("0", "1"):
        with pytest.raises(BertforgeError, match=r"^torchrun started 2 processes on this machine, which has 1 GPU: "
                                                 r"one a GPU \(--nproc_per_node=1\), or CUDA_VISIBLE_DEVICES= "):
            fake_group(1, WORLD_SIZE="2", RANK=local, LOCAL_RANK=local, LOCAL_WORLD_SIZE="2")
    (rank, world, device), calls = fake_group(0, WORLD_SIZE="2", RANK="1", LOCAL_RANK="1", LOCAL_WORLD_SIZE="2")
    assert device == torch.device("cpu") and calls["backend"] == "gloo"  # CUDA_VISIBLE_DEVICES= : the CPU
