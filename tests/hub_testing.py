"""Test helpers for the hub modules: a finished tiny QLoRA run on disk, and a stand-in Hub on loopback.

Not a test module (no ``test_`` prefix); the hub test modules import it (pytest puts ``tests/`` on ``sys.path``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import struct
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

#: A recognisable fake token: it must never show up in any output, log, message or file.
FAKE_TOKEN = "hf_FAKEtok3nTRLgrpoExtNeverPrintMe0123456789"

#: The quantities of the finished run: 64 prompts, 4 per step, G 8, micro-batch 8, a 40-step limit. Its
#: ``run_plan.json`` is the one a run writes (:func:`real_run_plan_json`), not a hand-written dict.
RUN_QUANTITIES = dict(prompts_per_step=4, num_generations=8, micro_batch_size=8, total_training_steps=40,
                      max_completion_length=24)
RUN_DATASET_SIZE = 64


def real_run_plan_json(output_dir: Path) -> str:
    """``run_plan.json`` as a run on :data:`RUN_QUANTITIES` writes it: the recipe's `resolve_plan` of
    ``GRPOExtConfig(...).resolved``, then `RunPlan.to_json` (what `GRPOExtTrainer` saves at the start of training)."""
    from trl_grpo_ext import GRPOExtConfig
    from trl_grpo_ext.plan import resolve_plan

    args = GRPOExtConfig(output_dir=str(output_dir), use_cpu=True, bf16=False, report_to=[], **RUN_QUANTITIES)
    return resolve_plan(args.resolved.quantity_fields(), RUN_DATASET_SIZE, 1, args.max_completion_length).to_json()


REWARDS = [
    {"name": "char_fraction", "weight": 1.0, "kwargs": {}},
    {"name": "format_bonus", "weight": 0.5, "kwargs": {"pattern": "^a+$"}},
]
TRAIN_RESULTS = {"train_runtime": 123.4, "train_loss": 0.0123, "train_samples_per_second": 10.37, "epoch": 2.5}
#: The prompts whose logits the merge tests compare.
PROMPTS = ["abc: write a a a", "xyz: write b, then stop."]


def png_bytes(width: int = 2, height: int = 2) -> bytes:
    """A valid grey PNG (hand-built: signature, IHDR, IDAT, IEND), standing in for the recipe's reward plot."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    raw = b"".join(b"\x00" + b"\x80" * width for _ in range(height))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def quantized_base(path, dtype: str = "float32", device: str = "cpu"):
    """The tiny model loaded as the recipe loads it: 4-bit NF4, double quant, ``dtype`` as load and compute dtype
    (float32 on a CPU, bfloat16 on a GPU)."""
    import torch
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    bnb = BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=getattr(torch, dtype),
    )
    return AutoModelForCausalLM.from_pretrained(
        path, quantization_config=bnb, dtype=getattr(torch, dtype), device_map={"": device}
    )


def trained_logits(model, tokenizer):
    """Logits of :data:`PROMPTS` through the forward training uses.

    The model is put in train mode (LoRA and attention dropout are 0, so this is deterministic): in eval mode without
    grad, bitsandbytes 0.50 on an AVX512-BF16 CPU repacks the 4-bit weights for another kernel, whose logits are 2.8e-3
    away from what a training step computes.
    """
    import torch

    batch = tokenizer(PROMPTS, return_tensors="pt", padding=True).to(model.device)
    model.train()
    with torch.no_grad():
        return model(**batch).logits.float()


def make_finished_run(output_dir: Path, token: str = FAKE_TOKEN, dtype: str = "float32", device: str = "cpu"):
    """Write what the recipe leaves in ``output_dir`` after a 4-bit QLoRA GRPO run on the tiny model.

    The adapter is real: LoRA r=8 on q/k/v/o (plus a trained ``lm_head`` copy, as the embedded default uses) on the
    NF4 base, with lora_B and the ``lm_head`` copy set to random non-zero values so the adapter changes the logits.

    ``dtype`` and ``device`` are the recipe's load/compute dtype and device (float32 on CPU, bfloat16 on GPU).

    Returns:
        ``(output_dir, reference_logits, base_path)``: reference logits of :data:`PROMPTS` from the 4-bit base +
        adapter (see :func:`trained_logits`), and the tiny base model's directory.
    """
    import torch
    from peft import LoraConfig, get_peft_model

    from trl_grpo_ext.models.embedded import tiny

    base_path = tiny.ensure_tiny_model()
    tokenizer = tiny.load_tokenizer(base_path)
    config = LoraConfig(
        r=8,
        lora_alpha=16,
        lora_dropout=0.0,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
        modules_to_save=["lm_head"],
        task_type="CAUSAL_LM",
    )
    model = get_peft_model(quantized_base(base_path, dtype, device), config)
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(0.2 * torch.randn(param.shape, generator=generator).to(param))
            elif "modules_to_save" in name:
                param.add_(0.05 * torch.randn(param.shape, generator=generator).to(param))
    reference = trained_logits(model, tokenizer)
    output_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    run_config = {
        "script_args": {
            "model_name_or_path": str(base_path),
            "dataset_name": "embedded:count-char",
            "dataset_url": f"https://user:{token}@data.example/count-char.jsonl",
        },
        "model_args": {
            "model_name_or_path": str(base_path),
            "dtype": dtype,
            "load_in_4bit": True,
            "bnb_4bit_quant_type": "nf4",
            "use_bnb_nested_quant": True,
            "lora_r": 8,
            "lora_alpha": 16,
        },
        "training_args": {
            "learning_rate": 1e-05,
            "loss_type": "dapo",
            "beta": 0.04,
            "seed": 42,
            "max_completion_length": 24,
            "include_num_input_tokens_seen": "no",
            "zero_variance_filter": "mask",
            "scale_rewards": "group",
            "advantage_baseline": "group_mean",
            "advantage_std_scaling": "group",
            "rewards": REWARDS,
            "push_to_hub": False,
            "hub_model_id": None,
            "hub_token": token,
        },
    }
    log_history = [
        {"step": 10, "reward": 0.125, "reward_std": 0.05, "frac_reward_zero_std": 0.5, "loss": 0.02},
        {"step": 40, "reward": 0.625, "reward_std": 0.25, "frac_reward_zero_std": 0.125, "loss": 0.0125},
        {"step": 40, "train_runtime": 123.4, "train_loss": 0.0123},
    ]
    (output_dir / "run_plan.json").write_text(real_run_plan_json(output_dir), encoding="utf-8")
    files = {
        "run_config.json": run_config,
        "trainer_state.json": {"global_step": 40, "log_history": log_history},
        "train_results.json": TRAIN_RESULTS,
    }
    for name, content in files.items():
        (output_dir / name).write_text(json.dumps(content, indent=2), encoding="utf-8")
    (output_dir / "reward_plot.png").write_bytes(png_bytes())
    return output_dir, reference, base_path


def hash_tree(root: Path) -> dict[str, str]:
    """``{relative path: sha256}`` of every file under ``root``."""
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


class StandInHub:
    """A minimal Hugging Face Hub on 127.0.0.1 that records repo creation, branches and committed files.

    It answers the endpoints ``HfApi.create_repo``, ``create_branch`` and ``upload_folder`` call: ``/api/repos/create``,
    ``/api/models/<repo>/branch/<b>``, ``/api/validate-yaml``, ``/api/models/<repo>/preupload/<rev>`` (every file
    "regular", so no LFS or Xet transfer is started and contents arrive base64-encoded in the commit) and
    ``/api/models/<repo>/commit/<rev>`` (ndjson). With ``fail_commit=True`` every commit gets HTTP 500 with
    ``Retry-After: 0`` (huggingface_hub retries 5 times, 1 s apart), and the error body echoes the request's
    Authorization header, as a careless proxy might, to prove the client-side redaction. With ``hang_commit=True``
    the commit request is held open (``commit_started`` is set) until the server closes.

    The server thread stops by itself after ``lifetime_s`` seconds, or at :meth:`close`.
    """

    def __init__(self, *, fail_commit: bool = False, hang_commit: bool = False, lifetime_s: float = 90.0):
        self.fail_commit = fail_commit
        self.hang_commit = hang_commit
        self.commit_started = threading.Event()
        self.calls: list[tuple[str, str]] = []
        self.created: list[dict] = []
        self.branches: list[str] = []
        self.commits: list[dict] = []
        self.auth_headers: set[str] = set()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep pytest output clean
                pass

            def handle_one_request(self):
                try:
                    super().handle_one_request()
                except OSError:  # the client went away (interrupted upload)
                    self.close_connection = True

            def _reply(self, code: int, payload: dict, extra_headers: tuple = ()):
                body = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for key, value in extra_headers:
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                hub.calls.append(("GET", self.path))
                self._reply(404, {"error": f"not served by the stand-in: {self.path}"})

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                path = self.path.split("?")[0]
                hub.calls.append(("POST", path))
                hub.auth_headers.add(self.headers.get("Authorization", ""))
                base = f"http://{self.headers['Host']}"
                if path == "/api/repos/create":
                    payload = json.loads(raw)
                    hub.created.append(payload)
                    repo = f"{payload['organization']}/{payload['name']}"
                    return self._reply(200, {"url": f"{base}/{repo}", "name": repo, "id": "stand-in"})
                if path == "/api/validate-yaml":
                    return self._reply(200, {"errors": [], "warnings": []})
                if "/branch/" in path:
                    hub.branches.append(path.rsplit("/branch/", 1)[1])
                    return self._reply(200, {})
                if "/preupload/" in path:
                    files = json.loads(raw)["files"]
                    modes = [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in files]
                    return self._reply(200, {"files": modes})
                if "/commit/" in path:
                    hub.commit_started.set()
                    if hub.hang_commit:  # an upload that never finishes, until the test interrupts the client
                        hub._stop.wait(lifetime_s)
                        return self._reply(503, {"error": "stand-in closed"})
                    if hub.fail_commit:
                        echo = f"internal error (request had {self.headers.get('Authorization')})"
                        return self._reply(500, {"error": echo}, (("Retry-After", "0"),))
                    repo, revision = path[len("/api/models/") :].split("/commit/")
                    commit = {"repo": repo, "revision": revision, "files": {}, "other": []}
                    for line in raw.splitlines():
                        item = json.loads(line)
                        if item["key"] == "file":
                            commit["files"][item["value"]["path"]] = base64.b64decode(item["value"]["content"])
                        elif item["key"] != "header":
                            commit["other"].append(item)
                    hub.commits.append(commit)
                    oid = "0" * 40
                    return self._reply(200, {"commitUrl": f"{base}/{repo}/commit/{oid}", "commitOid": oid})
                return self._reply(404, {"error": f"not served by the stand-in: {path}"})

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.timeout = 0.2
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._stop = threading.Event()
        deadline = time.monotonic() + lifetime_s

        def serve():
            while not self._stop.is_set() and time.monotonic() < deadline:
                self._server.handle_request()
            self._server.server_close()

        self._thread = threading.Thread(target=serve, name="stand-in-hub", daemon=True)
        self._thread.start()

    def close(self):
        """Stop the server thread and wait for it (at most 5 s)."""
        self._stop.set()
        self._thread.join(timeout=5)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
