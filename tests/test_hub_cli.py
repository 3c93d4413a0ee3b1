"""``trl-grpo-ext push`` (trl_grpo_ext.hub.cli): arguments, light imports, and real runs in a subprocess with
HF_ENDPOINT pointed at the stand-in Hub (tests/hub_testing.StandInHub) and the token in HF_TOKEN."""

import os
import signal
import subprocess
import sys

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

from hub_testing import FAKE_TOKEN, StandInHub, hash_tree, make_finished_run  # noqa: E402

from trl_grpo_ext import hub  # noqa: E402
from trl_grpo_ext.hub import cli as hub_cli  # noqa: E402

REPO = "someone/tiny-grpo"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: What ``trl_grpo_ext.cli.main`` does for ``push`` (parser from add_parser, then run), without the other sub-commands.
PARSER_CODE = (
    "import argparse, sys; from trl_grpo_ext.hub import cli as hub_cli; "
    "parser = argparse.ArgumentParser(prog='trl-grpo-ext'); "
    "hub_cli.add_parser(parser.add_subparsers(dest='command', required=True)); "
)


def build_parser():
    import argparse

    parser = argparse.ArgumentParser(prog="trl-grpo-ext")
    hub_cli.add_parser(parser.add_subparsers(dest="command", required=True))
    return parser


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return make_finished_run(tmp_path_factory.mktemp("run") / "output")[0]


def cli_command(args, endpoint, tmp_path):
    """The command and environment of ``trl-grpo-ext ARGS`` in a fresh process, online against ``endpoint``, with the
    token in HF_TOKEN and an empty HF_HOME (no stored login, no cache)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("HF_", "HUGGING"))}
    env.update(
        PYTHONPATH=ROOT,
        HF_ENDPOINT=endpoint,
        HF_TOKEN=FAKE_TOKEN,
        HF_HOME=str(tmp_path / "hf_home"),
        HF_HUB_DISABLE_TELEMETRY="1",
        NO_PROXY="127.0.0.1,localhost",
    )
    return [sys.executable, "-c", PARSER_CODE + "sys.exit(hub_cli.run(parser.parse_args()))", *args], env


def cli(args, endpoint, tmp_path):
    """Run ``trl-grpo-ext ARGS`` (see :func:`cli_command`) to completion."""
    command, env = cli_command(args, endpoint, tmp_path)
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


def test_defaults_and_flags():
    args = build_parser().parse_args(["push", "out", "--repo-id", REPO])
    assert (args.output_dir, args.repo_id, args.merge, args.revision, args.private, args.merge_dtype) == (
        "out",
        REPO,
        False,
        None,
        True,
        "bfloat16",
    )
    args = build_parser().parse_args(["push", "out", "--repo-id", REPO, "--merge", "--public", "--revision", "b"])
    assert (args.merge, args.private, args.revision) == (True, False, "b")


def test_private_and_public_exclude_each_other(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["push", "out", "--repo-id", REPO, "--private", "--public"])
    assert "not allowed with argument" in capsys.readouterr().err


def test_there_is_no_token_option(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["push", "out", "--repo-id", REPO, "--token", FAKE_TOKEN])


def test_merge_dtype_takes_the_exporters_dtypes_only(capsys):
    for dtype in ("bfloat16", "float16", "float32"):
        assert build_parser().parse_args(["push", "out", "--repo-id", REPO, "--merge-dtype", dtype]).merge_dtype == dtype
    with pytest.raises(SystemExit):
        build_parser().parse_args(["push", "out", "--repo-id", REPO, "--merge-dtype", "int4"])
    assert "invalid choice: 'int4'" in capsys.readouterr().err


def test_building_the_parser_imports_neither_torch_nor_huggingface_hub():
    code = PARSER_CODE + "print(sorted({'torch', 'huggingface_hub'} & set(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": ROOT}, capture_output=True, text=True
    )
    assert out.stdout.strip() == "[]", out.stderr


def test_push_then_failed_push_from_the_command_line(run, tmp_path):
    with StandInHub() as server:
        done = cli(["push", str(run), "--repo-id", REPO, "--revision", "exp"], server.url, tmp_path)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == f"Pushed the adapter of {run} to {server.url}/{REPO}/tree/exp"
        assert server.auth_headers == {f"Bearer {FAKE_TOKEN}"}
        assert "adapter_model.safetensors" in server.commits[0]["files"]
    before = hash_tree(run)
    with StandInHub(fail_commit=True) as server:
        failed = cli(["push", str(run), "--repo-id", REPO, "--revision", "exp"], server.url, tmp_path)
    assert failed.returncode == 1
    assert hash_tree(run) == before
    assert f"Retry with:\n  trl-grpo-ext push {run} --repo-id {REPO} --revision exp" in failed.stderr
    assert FAKE_TOKEN not in done.stdout + done.stderr + failed.stdout + failed.stderr


def test_interrupted_push_keeps_local_files_and_says_how_to_retry(run, tmp_path):
    hub.prepare_upload(run, repo_id=REPO)  # the local phase the command repeats byte for byte
    before = hash_tree(run)
    with StandInHub(hang_commit=True) as server:
        command, env = cli_command(["push", str(run), "--repo-id", REPO], server.url, tmp_path)
        # The child starts with SIGINT at its default action, as in a terminal (an ignored SIGINT would be inherited).
        process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        try:
            assert server.commit_started.wait(60), "the upload never reached the commit"
            process.send_signal(signal.SIGINT)  # Ctrl-C in the middle of the upload
            # longer than the stand-in's lifetime (90 s): a client that waits for its upload thread still ends
            out, err = process.communicate(timeout=150)
        finally:
            process.kill()
    assert process.returncode == 130
    assert hash_tree(run) == before
    assert (
        f"interrupted at upload_folder; nothing local was lost (the upload folder and its card stay ready).\nRetry with:\n  trl-grpo-ext push {run} --repo-id {REPO}"
        in err
    )
    assert FAKE_TOKEN not in out + err


def test_bad_output_dir_exits_with_2(tmp_path):
    done = cli(["push", str(tmp_path), "--repo-id", REPO], "http://127.0.0.1:9", tmp_path)
    assert done.returncode == 2
    assert "holds no PEFT adapter" in done.stderr
