"""Which rank and device a process takes under torchrun, on one machine or several: the global rank
(RANK, as the process group reports it) picks the rows and whether the process writes; the rank on
its machine (LOCAL_RANK) picks its GPU. Decided without a process group or a GPU."""

import pytest
import torch

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

    def launch(gpus: bool, **env):
        calls.clear()
        calls["env"] = env
        for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
            monkeypatch.delenv(name, raising=False)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus)
        return distributed.distributed_setup(), calls

    return launch


def test_second_machine_second_process_takes_its_local_gpu_and_its_global_rows(fake_group):
    # torchrun --nnodes=2 --nproc_per_node=2: the second process of the second machine
    (rank, world, device), calls = fake_group(True, WORLD_SIZE="4", RANK="3", LOCAL_RANK="1")
    assert (rank, world) == (3, 4)  # rows 3, 7, 11, ... of each global batch; not the writer
    assert device == torch.device("cuda", 1) and calls["cuda"] == 1  # its machine has GPUs 0 and 1 only
    assert calls["backend"] == "nccl"


def test_cpu_processes_join_with_gloo_and_single_runs_join_nothing(fake_group):
    (rank, world, device), calls = fake_group(False, WORLD_SIZE="4", RANK="2", LOCAL_RANK="0")
    assert (rank, world, device) == (2, 4, torch.device("cpu"))
    assert calls["backend"] == "gloo" and "cuda" not in calls
    (rank, world, device), calls = fake_group(True)  # no torchrun: one process, the first GPU
    assert (rank, world, device) == (0, 1, torch.device("cuda", 0)) and "backend" not in calls
