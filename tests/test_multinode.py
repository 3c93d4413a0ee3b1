"""Two "machines" on localhost: two torchrun invocations (``--nnodes 2 --node_rank 0|1``, one process each, a static
rendezvous on 127.0.0.1), the way `accelerate launch --num_machines 2 --machine_rank R --main_process_ip IP` starts a
DDP run. The run's world size is 2 on both nodes and its plan is the plan `trl-grpo-ext plan` prints for an accelerate
config of 2 machines with 2 processes in all (accelerate's num_processes counts every machine's processes).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest
import yaml
from factories import ROOT

from trl_grpo_ext.cli import plan as plan_cli
from trl_grpo_ext.models.embedded import tiny

pytestmark = [pytest.mark.slow, pytest.mark.multiproc]

#: the worker's run (tests/engines_worker.py) as a run config: 4 prompts × G 4 on 32 prompts, micro-batch 4, 3 steps
RUN = {"model_name_or_path": "embedded:tiny-qwen2", "dataset_name": "embedded:count-char", "embedded_num_prompts": 32,
       "rewards": [{"name": "char_fraction"}], "prompts_per_step": 4, "num_generations": 4, "micro_batch_size": 4,
       "total_training_steps": 3, "max_completion_length": 8, "use_cpu": True, "bf16": False}
TWO_MACHINES = {"distributed_type": "MULTI_CPU", "num_machines": 2, "num_processes": 2, "machine_rank": 0,
                "main_process_ip": "127.0.0.1", "use_cpu": True}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_machines_on_localhost_agree_with_the_plan(tmp_path, capsys, monkeypatch):
    tiny.ensure_tiny_model()
    port = str(_free_port())
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    env.pop("WORLD_SIZE", None)
    logs = [open(tmp_path / f"node{rank}.log", "w") for rank in (0, 1)]  # files: a full pipe would block a node
    nodes = [
        subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "1", "--node_rank",
             str(rank), "--master_addr", "127.0.0.1", "--master_port", port, str(ROOT / "tests" / "engines_worker.py"),
             str(tmp_path / f"node{rank}"), "mask"],
            env=env, cwd=ROOT, stdout=logs[rank], stderr=subprocess.STDOUT)
        for rank in (0, 1)
    ]
    try:
        for node in nodes:
            node.wait(timeout=120)
    finally:
        for node in nodes:  # a node left waiting for its peer would outlive the test
            if node.poll() is None:
                node.kill()
        for log in logs:
            log.close()
    for rank, node in enumerate(nodes):
        assert node.returncode == 0, (tmp_path / f"node{rank}.log").read_text()[-3000:]
    # each node writes the file of its own global rank (node 0 holds rank 0, node 1 rank 1)
    runs = [json.loads((tmp_path / f"node{r}" / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [(r["node_rank"], r["local_world_size"], r["world_size"]) for r in runs] == [(0, 1, 2), (1, 1, 2)]
    assert runs[0]["plan_json"] == runs[1]["plan_json"] and runs[0]["global_step"] == runs[0]["plan"]["total_steps"]

    config, accelerate = tmp_path / "run.yaml", tmp_path / "two_machines.yaml"
    config.write_text(yaml.safe_dump({**RUN, "output_dir": str(tmp_path / "out")}))
    accelerate.write_text(yaml.safe_dump(TWO_MACHINES))
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert plan_cli.main(["--config", str(config), "--accelerate-config", str(accelerate), "--json"]) == 0
    planned = json.loads(capsys.readouterr().out)
    keys = ("world_size", "gradient_accumulation_steps", "completions_per_step", "steps_per_epoch", "total_steps",
            "stop_reason")
    assert {k: planned[k] for k in keys} == {k: runs[0]["plan_json"][k] for k in keys}
    # 16 completions per step over 2 processes of micro-batch 4: 2 micro-batches each (1 process would need 4)
    assert (planned["world_size"], planned["gradient_accumulation_steps"], planned["total_steps"]) == (2, 2, 3)
