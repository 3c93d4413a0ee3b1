#!/usr/bin/env bash
# The GPU checks of this project in one run, for a lent single-GPU machine with no network (see docs/benchmarks.md):
#   1. adapter precision (float32 vs bf16 adapters) on a ~0.5B Qwen2.5-0.5B-shaped model: s/step, peak memory, lost updates
#   2. merged-export tolerance on the GPU (bf16 compute)
#   3. the QLoRA recipe end to end under `accelerate launch` (single_gpu.yaml, bf16) on that 0.5B-shaped model
# Wheels missing on the machine travel in .whl/ (trl, transformers, peft, bitsandbytes, datasets, ...).
# Usage there: OUT=<dir> bash benchmarks/gpu_checks.sh
set -u
source benchmarks/gpu_env.sh /tmp/gpu_checks
python3 - <<'PY' 2>&1 | tee "$OUT/versions.txt"
import torch, transformers, trl, peft, bitsandbytes, datasets, accelerate
print("gpu", torch.cuda.get_device_name(0), "torch", torch.__version__, "transformers", transformers.__version__,
      "trl", trl.__version__, "peft", peft.__version__, "bitsandbytes", bitsandbytes.__version__,
      "datasets", datasets.__version__, "accelerate", accelerate.__version__)
PY

echo "== 1. adapter precision (cuda)"
timeout 300 python3 benchmarks/adapter_precision.py --device cuda 2>&1 | tee "$OUT/adapter_precision_cuda.txt" | grep -v Warning

echo "== 2. merged-export tolerance (cuda, bf16)"
timeout 90 python3 benchmarks/merge_tolerance.py --device cuda --dtype bfloat16 2>&1 | tee "$OUT/merge_tolerance_cuda.txt" | grep -v Warning

echo "== 3. recipe on the GPU (accelerate launch, single_gpu.yaml)"
python3 - <<'PY'
import torch
from transformers import AutoModelForCausalLM, Qwen2Config
from trl_grpo_ext import tiny
tok = tiny.build_tokenizer()
config = Qwen2Config(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                     num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True, max_position_embeddings=2048,
                     rope_theta=1000000.0, rms_norm_eps=1e-6, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
torch.manual_seed(0)
model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
model.save_pretrained("/tmp/qwen2.5-0.5b-shaped"); tok.save_pretrained("/tmp/qwen2.5-0.5b-shaped")
print("built", sum(p.numel() for p in model.parameters()) / 1e6, "M parameters")
PY
sed -e 's#^model_name_or_path: .*#model_name_or_path: /tmp/qwen2.5-0.5b-shaped#' \
    -e 's#^lora_modules_to_save: .*##' -e 's#^use_cpu: true#use_cpu: false#' -e 's#^bf16: false#bf16: true#' \
    -e 's#^output_dir: .*#output_dir: /tmp/gpu_recipe_run#' -e 's#^learning_rate: .*#learning_rate: 1.0e-4#' \
    -e 's#^total_training_steps: .*#total_training_steps: 10#' -e 's#^max_completion_length: .*#max_completion_length: 64#' \
    -e 's#^prompts_per_step: .*#prompts_per_step: 4#' -e 's#^save_steps: .*#save_steps: 5#' \
    recipes/configs/tiny_cpu.yaml > /tmp/gpu_recipe.yaml
/usr/bin/time -v timeout 240 python3 -m accelerate.commands.launch --config_file recipes/accelerate_configs/single_gpu.yaml \
  recipes/grpo_qlora.py --config /tmp/gpu_recipe.yaml > "$OUT/recipe_gpu.log" 2>&1
echo "recipe exit code: $?"
grep -E "Mean reward|Adapter and tokenizer|Reward plot|Stopped at|step_time|Error|error" "$OUT/recipe_gpu.log" | tail -8
grep -E "Maximum resident|Elapsed" "$OUT/recipe_gpu.log"
cp /tmp/gpu_recipe_run/trainer_state.json /tmp/gpu_recipe_run/run_plan.json /tmp/gpu_recipe_run/reward_plot.png "$OUT/" 2>/dev/null
python3 -c "
import json; s=json.load(open('/tmp/gpu_recipe_run/trainer_state.json'))
st=[h['step_time'] for h in s['log_history'] if 'step_time' in h]
print('global_step', s['global_step'], 'median step_time s', sorted(st)[len(st)//2])
" 2>&1
ls -la /tmp/gpu_recipe_run | head -20
