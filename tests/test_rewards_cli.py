"""Tests of trl_grpo_ext.rewards.cli: `trl-grpo-ext rewards [--json]`, and that it never imports torch."""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys

from trl_grpo_ext.rewards import cli

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _parser():
    parser = argparse.ArgumentParser(prog="trl-grpo-ext")
    cli.add_parser(parser.add_subparsers(dest="command"))
    return parser


def test_table(capsys):
    assert cli.run(_parser().parse_args(["rewards"])) == 0
    out = capsys.readouterr().out
    assert "accuracy (alias: math_accuracy)\n    1.0 if the math answer equals the reference (math-verify).\n" in out
    assert "    parameters: max_length, min_length=0, unit='tokens'\n" in out
    assert 'example: {name: soft_overlong, kwargs: {"max_completion_len": 8, "soft_punish_cache": 4}}' in out


def test_json_in_a_fresh_process_without_torch():
    code = (
        "import sys, json\n"
        "from trl_grpo_ext.rewards.cli import main\n"
        "main(['--json'])\n"
        "heavy = sorted({'torch', 'trl', 'transformers', 'math_verify'} & set(sys.modules))\n"
        "print(json.dumps(heavy), file=sys.stderr)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRL_GRPO_EXT_DISABLE_ENTRY_POINTS": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60, check=True
    )
    assert json.loads(proc.stderr.strip().splitlines()[-1]) == []
    listed = {item["name"]: item for item in json.loads(proc.stdout)}
    assert {"accuracy", "exact_match", "numeric_match", "format", "tag_count", "length", "soft_overlong",
            "repetition_penalty", "char_fraction", "think_format_reward"} <= set(listed)  # fmt: skip
    assert listed["accuracy"]["aliases"] == ["math_accuracy"]
    assert listed["length"]["parameters"][0] == {
        "name": "max_length",
        "required": True,
        "default": None,
        "annotation": "int",
    }


def test_module_entry_point_runs():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "trl_grpo_ext.rewards.cli"], capture_output=True, text=True, env=env,
                          timeout=60, check=True)  # fmt: skip
    assert proc.stdout.splitlines()[0] == "accuracy (alias: math_accuracy)"
