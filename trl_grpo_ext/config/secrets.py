"""Secret scrubbing for what leaves a run's process (``run_config.json``, the card, log lines, error messages); pure
standard library, so that the recipe, the card and the push share it without importing each other."""

from __future__ import annotations

import re

__all__ = ["REDACTED", "is_secret_key", "redact_text", "scrub_secrets"]

REDACTED = "<redacted>"
#: A Hugging Face user access token ("hf_" and 34 letters/digits; 30+ accepted).
_HF_TOKEN_PATTERN = re.compile(r"hf_[A-Za-z0-9]{30,}")
_SECRET_WORDS = ("secret", "password", "passwd", "api_key", "apikey", "authorization", "credential")
_TOKENIZER_TOKEN_KEY = re.compile(r"(pad|eos|bos|unk|sep|cls|mask)_token")


def is_secret_key(key: str) -> bool:
    """Whether a config key holds a secret: it ends with ``token`` (as transformers' ``TrainingArguments.to_dict``
    judges ``*_token``; tokenizer special tokens such as ``pad_token`` excepted) or contains a word of
    ``_SECRET_WORDS``."""
    key = key.lower()
    if _TOKENIZER_TOKEN_KEY.fullmatch(key):
        return False
    return key.endswith("token") or any(word in key for word in _SECRET_WORDS)


def scrub_secrets(obj, token: str | None = None):
    """A scrubbed copy of a JSON-like object: under a secret key every value but None, ``""``, a bool or a number
    becomes `REDACTED`; every other string goes through :func:`redact_text` (``token``: a value to remove anywhere)."""
    if isinstance(obj, dict):
        return {key: REDACTED if isinstance(key, str) and is_secret_key(key) and not _is_harmless(value)
                else scrub_secrets(value, token) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [scrub_secrets(value, token) for value in obj]
    if isinstance(obj, str):
        return redact_text(obj, token)
    return obj


def _is_harmless(value) -> bool:
    return value is None or value == "" or isinstance(value, (bool, int, float))


def redact_text(text: str, token: str | None = None) -> str:
    """``text`` with ``token`` (4+ characters), Hugging Face tokens and HTTP bearer credentials replaced by
    `REDACTED`."""
    if token and len(token) >= 4:
        text = text.replace(token, REDACTED)
    text = _HF_TOKEN_PATTERN.sub(REDACTED, text)
    return re.sub(r"(?i)(bearer\s+)\S+", r"\1" + REDACTED, text)
