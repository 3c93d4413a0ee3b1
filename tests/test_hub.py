"""Push of a finished run (trl_grpo_ext.hub): arguments, secret scrubbing, and the real huggingface_hub client talking
to a stand-in Hub on 127.0.0.1 (tests/hub_testing.StandInHub) that records what it is sent."""

import json
import logging
import os
import traceback
from types import SimpleNamespace

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

from hub_testing import FAKE_TOKEN, StandInHub, hash_tree, make_finished_run  # noqa: E402

from trl_grpo_ext import hub  # noqa: E402

REPO = "someone/tiny-grpo"
ADAPTER_UPLOAD = {
    "README.md",
    "adapter_config.json",
    "adapter_model.safetensors",
    "chat_template.jinja",
    "reward_plot.png",
    "run_config.json",
    "run_plan.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "train_results.json",
}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return make_finished_run(tmp_path_factory.mktemp("run") / "output")[0]


@pytest.fixture
def online(monkeypatch):
    """Point huggingface_hub at a fresh stand-in Hub (the endpoint is read when HfApi is created) and lift the
    offline switch the test session sets; the server stops at teardown, or by itself after 90 s."""
    import huggingface_hub.constants as constants

    def start(**kwargs):
        server = StandInHub(**kwargs)
        monkeypatch.setattr(constants, "ENDPOINT", server.url)
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        servers.append(server)
        return server

    servers = []
    yield start
    for server in servers:
        server.close()


# ----------------------------------------------------------------------------------------------- secrets


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        ("hub_token", True),
        ("push_to_hub_token", True),
        ("HF_TOKEN", True),
        ("token", True),
        ("wandb_api_key", True),
        ("db_password", True),
        ("pad_token", False),
        ("eos_token", False),
        ("pad_token_id", False),
        ("max_completion_length", False),
        ("include_num_input_tokens_seen", False),
        ("average_tokens_across_devices", False),
    ],
)
def test_secret_key_rule(key, secret):
    assert hub.is_secret_key(key) is secret


def test_scrub_secrets_redacts_keys_and_token_shaped_values_without_touching_the_input():
    config = {
        "training_args": {"hub_token": FAKE_TOKEN, "max_completion_length": 24, "pad_token": "<|endoftext|>"},
        "urls": [f"https://u:{FAKE_TOKEN}@host/x"],
        "hub_token": None,
        "other": "plain",
        "custom": "s3cr3t-value",
    }
    scrubbed = hub.scrub_secrets(config, token="s3cr3t-value")
    assert scrubbed == {
        "training_args": {"hub_token": "<redacted>", "max_completion_length": 24, "pad_token": "<|endoftext|>"},
        "urls": ["https://u:<redacted>@host/x"],
        "hub_token": None,
        "other": "plain",
        "custom": "<redacted>",
    }
    assert config["training_args"]["hub_token"] == FAKE_TOKEN


# --------------------------------------------------------------------------------------------- arguments


def test_push_arguments_defaults_push_nothing():
    args = hub.HubPushArguments()
    settings = args.resolve(SimpleNamespace(push_to_hub=False, hub_model_id=None))
    assert (args.push_to_hub_mode, args.hub_private, args.merge_dtype) == ("none", True, "bfloat16")
    assert not settings.enabled


@pytest.mark.parametrize(("field", "value"), [("push_to_hub_mode", "gguf"), ("merge_dtype", "int4")])
def test_push_arguments_reject_unknown_values(field, value):
    with pytest.raises(ValueError, match=f"{field}='{value}'"):
        hub.HubPushArguments(**{field: value})


def test_trl_push_to_hub_means_adapter_and_the_trainer_stops_pushing_by_itself():
    training_args = SimpleNamespace(
        push_to_hub=True, hub_model_id="me/from-trl", hub_revision="exp", hub_private_repo=None, hub_token=FAKE_TOKEN
    )
    settings = hub.HubPushArguments().resolve(training_args)
    assert (settings.mode, settings.repo_id, settings.revision, settings.private) == (
        "adapter",
        "me/from-trl",
        "exp",
        True,
    )
    assert training_args.push_to_hub is False
    assert FAKE_TOKEN not in repr(settings)


def test_own_repo_id_wins_and_trl_private_setting_takes_precedence():
    args = hub.HubPushArguments(push_to_hub_mode="merged", hub_repo_id="me/mine", hub_private=True)
    settings = args.resolve(SimpleNamespace(hub_model_id="me/trl", hub_private_repo=False))
    assert (settings.mode, settings.repo_id, settings.private) == ("merged", "me/mine", False)


def test_push_without_repository_is_rejected():
    with pytest.raises(ValueError, match="hub_repo_id"):
        hub.HubPushArguments(push_to_hub_mode="adapter").resolve(SimpleNamespace(hub_model_id=None))


def test_arguments_parse_next_to_grpo_config_without_clashes(tmp_path):
    from trl import GRPOConfig, TrlParser

    parser = TrlParser((hub.HubPushArguments, GRPOConfig))
    push_args, training_args = parser.parse_args_into_dataclasses(
        ["--push_to_hub_mode", "merged", "--hub_repo_id", "me/x", "--merge_dtype", "float16", "--hub_revision", "exp"]
        + ["--output_dir", str(tmp_path), "--bf16", "False"]
    )
    settings = push_args.resolve(training_args)
    assert (settings.mode, settings.repo_id, settings.revision, settings.merge_dtype) == (
        "merged",
        "me/x",
        "exp",
        "float16",
    )


def test_retry_command_is_exact_and_shell_quoted(tmp_path):
    run_dir = tmp_path / "my run"
    command = hub.retry_command(run_dir, "me/x", mode="merged", revision="exp", private=False, merge_dtype="float16")
    assert (
        command
        == f"trl-grpo-ext push '{run_dir}' --repo-id me/x --merge --merge-dtype float16 --revision exp --public"
    )


# ------------------------------------------------------------------------------------------------ pushes


def test_adapter_push_creates_the_repo_and_uploads_the_local_files(run, online, caplog, capsys):
    server = online()
    with caplog.at_level(logging.DEBUG):
        url = hub.push_run(run, REPO, revision="exp", token=FAKE_TOKEN)
    assert url == f"{server.url}/{REPO}/tree/exp"
    assert server.created == [{"name": "tiny-grpo", "organization": "someone", "visibility": "private"}]
    assert server.branches == ["exp"]
    assert server.auth_headers == {f"Bearer {FAKE_TOKEN}"}  # the client authenticated with the token given
    (commit,) = server.commits
    assert (commit["repo"], commit["revision"], commit["other"]) == (REPO, "exp", [])
    assert set(commit["files"]) == ADAPTER_UPLOAD
    folder = run / "adapter"
    for name, content in commit["files"].items():
        assert content == (folder / name).read_bytes(), name  # uploaded bytes are the local files' bytes
    assert commit["files"]["adapter_model.safetensors"] == (run / "adapter_model.safetensors").read_bytes()
    assert json.loads(commit["files"]["run_config.json"])["training_args"]["hub_token"] == "<redacted>"
    card = commit["files"]["README.md"].decode()
    assert "library_name: peft" in card and "- trl-grpo-ext" in card
    assert (run / "README.md").read_text() == card
    for content in commit["files"].values():
        assert FAKE_TOKEN.encode() not in content
    captured = capsys.readouterr()
    assert FAKE_TOKEN not in caplog.text + captured.out + captured.err


def test_merged_push_uploads_a_plain_transformers_model(run, online):
    server = online()
    url = hub.push_run(run, REPO, mode="merged", private=False, token=FAKE_TOKEN, merge_dtype="float32")
    assert url == f"{server.url}/{REPO}"
    assert server.created[0]["visibility"] == "public"
    assert server.branches == []
    (commit,) = server.commits
    assert commit["revision"] == "main"
    expected = (ADAPTER_UPLOAD - {"adapter_config.json", "adapter_model.safetensors"}) | {
        "model.safetensors",
        "config.json",
        "generation_config.json",
        "merge_info.json",
    }
    assert set(commit["files"]) == expected
    assert "library_name: transformers" in commit["files"]["README.md"].decode()
    assert json.loads(commit["files"]["merge_info.json"])["dtype"] == "float32"
    assert "quantization_config" not in json.loads(commit["files"]["config.json"])


def test_failed_upload_loses_nothing_and_says_how_to_retry(run, online, caplog, capsys):
    hub.prepare_upload(run, repo_id=REPO, token=FAKE_TOKEN)  # phase 1 alone; push_run repeats it, byte for byte
    before = hash_tree(run)
    server = online(fail_commit=True)
    with caplog.at_level(logging.DEBUG), pytest.raises(hub.HubPushError) as failure:
        hub.push_run(run, REPO, revision="exp", token=FAKE_TOKEN)
    assert hash_tree(run) == before
    assert ("POST", f"/api/models/{REPO}/commit/exp") in server.calls and server.commits == []
    message = str(failure.value)
    assert "failed at upload_folder" in message and "500" in message
    assert f"Retry with:\n  trl-grpo-ext push {run} --repo-id {REPO} --revision exp" in message
    assert "<redacted>" in message  # the server echoed the Authorization header; it was redacted
    printed = "".join(traceback.format_exception(failure.value)) + caplog.text + "".join(capsys.readouterr())
    assert FAKE_TOKEN not in message + printed
    assert failure.value.__cause__ is None and failure.value.__suppress_context__


def test_no_token_fails_before_any_network_call(run, online, monkeypatch, tmp_path):
    import huggingface_hub.constants as constants

    server = online()
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    with pytest.raises(hub.HubPushError, match="No Hugging Face token found") as failure:
        hub.push_run(run, REPO)
    assert f"trl-grpo-ext push {run} --repo-id {REPO}" in str(failure.value)
    assert server.calls == []
    assert (run / "adapter" / "README.md").is_file()


def test_offline_the_push_names_hf_hub_offline_not_a_login(run, monkeypatch, tmp_path):
    # a breaker's finding: without a token it said "Log in with `hf auth login`", which would not have helped
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    with pytest.raises(hub.HubPushError, match="HF_HUB_OFFLINE is set, so nothing was pushed. The adapter files are "
                                               "ready in ") as failure:
        hub.push_run(run, REPO)
    assert f"trl-grpo-ext push {run} --repo-id {REPO}" in str(failure.value) and "hf auth login" in str(failure.value)


def test_a_push_that_fails_leaves_the_run_s_own_card_as_it_was(tmp_path, monkeypatch):
    """A new user's finding: a push without a token rewrote output_dir/README.md to load the repository that was never
    created (`model_id = "you/tiny-test"`), so its snippet failed; the upload's card is the one to name it."""
    import huggingface_hub.constants as constants

    fresh = make_finished_run(tmp_path / "output")[0]
    card = hub.build_model_card(fresh)
    card.save(fresh / "README.md")  # as the recipe writes it: snippets load the run's folder
    before = (fresh / "README.md").read_bytes()
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    with pytest.raises(hub.HubPushError, match="No Hugging Face token found"):
        hub.push_run(fresh, REPO)
    assert (fresh / "README.md").read_bytes() == before and REPO not in before.decode()
    assert f'model_id = "{fresh.resolve()}"' in before.decode()
    assert REPO in (fresh / "adapter" / "README.md").read_text()  # the upload's card, ready for the retry


def test_invalid_repo_id_is_rejected_before_anything_is_written(tmp_path):
    with pytest.raises(ValueError, match="repo_id='not a repo'"):
        hub.push_run(tmp_path, "not a repo", token=FAKE_TOKEN)
    assert list(tmp_path.iterdir()) == []
