"""Keys of other tools in a run config (``trl grpo``, open-r1, older TRL and transformers), translated to ours or
refused with what to do instead; read by the front door before the unknown-key check."""

from __future__ import annotations

import os

#: Other names of our keys: ``trl grpo`` and open-r1 call the reward list ``reward_funcs``.
ALIASES = {"reward_funcs": "rewards"}

#: Keys renamed upstream: old -> (new, why); the value is read as the new key.
RENAMED = {
    "torch_dtype": ("dtype", "transformers 5 and trl.ModelConfig renamed it `dtype`"),
    "warmup_ratio": ("warmup_steps", "transformers 5 removed it; a `warmup_steps` below 1 is a fraction of the steps"),
}

#: open-r1's Weights & Biases keys, applied as the environment variables wandb reads (unless already set).
ENV_KEYS = {"wandb_entity": "WANDB_ENTITY", "wandb_project": "WANDB_PROJECT", "wandb_run_group": "WANDB_RUN_GROUP"}

_BRANCH_PUSH = "open-r1's branch push is not supported; push with `push_to_hub_mode` and `hub_repo_id` (docs/hub.md)."
#: Keys that no longer exist or that this package does not support: key -> what to do instead.
REMOVED = {
    "vllm_device": "removed from TRL's GRPOConfig; use `vllm_mode: colocate` or `vllm_mode: server`.",
    "reward_model_name_or_path": "a reward model is not supported by the recipe; use reward functions (`rewards:`), "
                                 "or GRPOExtTrainer(reward_funcs=[...]) in your own script.",
    "datasets": "dataset mixtures are not supported by the recipe; give one `dataset_name` (and `dataset_config`).",
    "hub_model_revision": _BRANCH_PUSH,
    "push_to_hub_revision": _BRANCH_PUSH,
    "overwrite_hub_revision": _BRANCH_PUSH,
    "benchmarks": "remove it and run `trl-grpo-ext eval` (or lighteval) on output_dir.",
    "callbacks": "add callbacks in your own script with `trainer.add_callback(...)`.",
    **dict.fromkeys(("cosine_min_value_wrong", "cosine_max_value_wrong", "cosine_min_value_correct",
                     "cosine_max_value_correct", "cosine_max_len", "repetition_n_grams", "repetition_max_penalty",
                     "code_language", "code_eval_test_batch_size", "parallel_code_exec_per_proc", "e2b_router_url",
                     "morph_router_url", "code_provider", "ioi_provider"),
                    "open-r1's reward setting: give it as a parameter of its reward (`rewards: [{name: "
                    "cosine_scaled_reward, kwargs: {max_len: 1000}}]`; `trl-grpo-ext rewards` lists each one's)."),
}

#: List keys accepted when empty (open-r1 writes `callbacks: []`).
_EMPTY_OK = {"benchmarks", "callbacks"}

def cli_keys(args: list[str]) -> list[tuple[int, str]]:
    """``(index, key)`` of each ``--key`` token of ``args`` (``--key=value`` included)."""
    return [(i, token[2:].split("=", 1)[0]) for i, token in enumerate(args) if token.startswith("--") and len(token) > 2]


def translate(config: dict, args: list[str], notes: list[str], problems) -> tuple[dict, list[str]]:
    """``(config, args)``: the YAML mapping and the command line with :data:`ALIASES` and :data:`RENAMED` applied, the
    YAML's :data:`ENV_KEYS` set in the environment (a note per translation in ``notes``); one line per refused key
    (:data:`REMOVED`, or an old name beside its new one) added to ``problems`` (a `validation.problems.Problems`)."""
    config, args = dict(config), list(args)
    new_names = {**ALIASES, **{old: new for old, (new, _) in RENAMED.items()}}
    given_on_cli = {key.replace("-", "_") for _, key in cli_keys(args)}
    for i, key in cli_keys(args):
        if key.replace("-", "_") in new_names:
            args[i] = args[i].replace(f"--{key}", f"--{new_names[key.replace('-', '_')]}", 1)
    for old, new in new_names.items():
        if (old in config and new in config) or (old in given_on_cli and new in given_on_cli):
            where = "in the config" if old in config and new in config else "on the command line"
            problems.add(f"{old!r} and {new!r} are both set {where}; {old!r} is another name for {new!r}: keep one")
        elif old in config or old in given_on_cli:
            if old in config:
                config[new] = config.pop(old)
            notes.append(f"{old} read as {new} ({RENAMED[old][1] if old in RENAMED else 'the same setting'}).")
    if {"hub_private", "hub_private_repo"} <= set(config) or {"hub_private", "hub_private_repo"} <= given_on_cli:
        problems.add("'hub_private_repo' and 'hub_private' are both set; they are two names of one setting and "
                        "TRL's hub_private_repo would silently win (a public repository): keep one")
    for key, env in ENV_KEYS.items():  # the environment wins
        value = config.pop(key, None)
        if value is not None and os.environ.get(env) not in (None, ""):
            notes.append(f"{key}: {env} is already set to {os.environ[env]!r} in the environment, which wins; "
                         f"{value!r} is not used.")
        elif value is not None:
            os.environ[env] = str(value)
            notes.append(f"{key}: set {env}={value} for wandb.")
    for key, fix in REMOVED.items():
        if key in _EMPTY_OK and config.get(key) in ([], None):
            config.pop(key, None)
        elif key in config:
            problems.add(f"{key!r}: {fix}")
    for key in (key.replace("-", "_") for _, key in cli_keys(args)):
        if key in REMOVED:
            problems.add(f"--{key}: {REMOVED[key]}")
    return config, args
