"""Test-only: let accelerate 1.15 run FSDP2 on 2 CPU processes (gloo), for tests/engines_worker.py under
recipes/accelerate_configs/fsdp2_cpu.yaml.

accelerate's ``AcceleratorState.__init__`` takes its FSDP branch (``distributed_type = FSDP``, ``fsdp_plugin = ...``)
only when the processes' type is one of the GPU-like ``MULTI_*`` types; on a CPU they are ``MULTI_CPU`` and the
plugin is dropped, so the package refuses FSDP without a GPU (`validation.engines.check_engine_device`). `enable`
applies that branch's assignments (and the copy of the type into ``PartialState``, as ``__init__`` does at its end) to a ``MULTI_CPU`` state that was given an FSDP plugin (the branch's
mixed-precision call is skipped: these runs are float32) and lifts the package's refusals of FSDP on a CPU
(no GPU, or use_cpu=True, which the tiny runs set) in this process only.
Everything after that is accelerate's and torch's own FSDP2 path: ``fully_shard`` over a device mesh of type "cpu",
the gradient all-reduce/reduce-scatter over gloo, and ``get_state_dict`` (full state dict) when saving.
"""

from __future__ import annotations


def enable() -> None:
    """Patch ``accelerate.state.AcceleratorState.__init__`` and the package's FSDP-on-CPU refusals (this process)."""
    from accelerate import state
    from accelerate.utils import DistributedType

    import trl_grpo_ext.validation.engines

    original = state.AcceleratorState.__init__

    def init(self, *args, fsdp_plugin=None, **kwargs):
        original(self, *args, fsdp_plugin=fsdp_plugin, **kwargs)
        if fsdp_plugin is not None and self.distributed_type == DistributedType.MULTI_CPU:
            self.distributed_type = DistributedType.FSDP
            self.fsdp_plugin = fsdp_plugin
            state.PartialState._shared_state["distributed_type"] = self.distributed_type  # as the branch's end does

    state.AcceleratorState.__init__ = init
    # GRPOExtConfig.__post_init__ and check_engine_settings look the check up in its module when they run, so the
    # module's name is patched
    trl_grpo_ext.validation.engines.check_engine_device = lambda engine, accelerator_available, use_cpu=False: None
