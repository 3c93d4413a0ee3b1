"""Secret scrubbing: what never leaves a run's process in a file, a card, a log line or an error message.

:func:`scrub_secrets` cleans a JSON-like object (``run_config.json``, the card's configuration block) and
:func:`redact_text` cleans one string (error messages of the Hub client). Both replace what they remove by
:data:`REDACTED`. Pure Python, standard library only: the recipe's launcher, the model card and the push use it
without importing each other.
"""

from __future__ import annotations

import re

__all__ = ["REDACTED", "is_secret_key", "redact_text", "scrub_secrets"]

#: What a removed secret is replaced by.
REDACTED = "<redacted>"
#: A Hugging Face user access token ("hf_" and 34 letters/digits; 30+ accepted).
_HF_TOKEN_PATTERN = re.compile(r"hf_[A-Za-z0-9]{30,}")
_SECRET_WORDS = ("secret", "password", "passwd", "api_key", "apikey", "authorization", "credential")
_TOKENIZER_TOKEN_KEY = re.compile(r"(pad|eos|bos|unk|sep|cls|mask)_token")


def is_secret_key(key: str) -> bool:
    """Whether a config key holds a secret.

    The rule: the key, lower-cased, ends with ``token`` (``hub_token``, ``push_to_hub_token``, ``hf_token``,
    ``token``, ``access_token``: the same rule transformers' ``TrainingArguments.to_dict`` applies to ``*_token``) or
    contains one of ``secret``, ``password``, ``passwd``, ``api_key``, ``apikey``, ``authorization``, ``credential``.
    Tokenizer special-token names (``pad_token``, ``eos_token``, ...) are not secrets. Keys that merely contain
    "token" elsewhere (``max_completion_length``, ``include_num_input_tokens_seen``, ``pad_token_id``) are kept.
    """
    key = key.lower()
    if _TOKENIZER_TOKEN_KEY.fullmatch(key):
        return False
    return key.endswith("token") or any(word in key for word in _SECRET_WORDS)


def scrub_secrets(obj, token: str | None = None):
    """A copy of a JSON-like object with every secret replaced by ``"<redacted>"``.

    Args:
        obj: nested dicts / lists / scalars (e.g. the content of ``run_config.json``).
        token (`str`, *optional*): a token value to remove wherever it appears, whatever the key.

    Returns:
        The scrubbed copy. Under a secret key (:func:`is_secret_key`) any value other than ``None``, ``""``, a bool or
        a number becomes ``"<redacted>"``; in every other string, substrings that look like a Hugging Face token
        (``hf_`` + 30 or more letters/digits) or equal ``token`` are replaced. The input is not modified.
    """
    if isinstance(obj, dict):
        out = {}
        for key, value in obj.items():
            if isinstance(key, str) and is_secret_key(key) and not _is_harmless(value):
                out[key] = REDACTED
            else:
                out[key] = scrub_secrets(value, token)
        return out
    if isinstance(obj, (list, tuple)):
        return [scrub_secrets(value, token) for value in obj]
    if isinstance(obj, str):
        return redact_text(obj, token)
    return obj


def _is_harmless(value) -> bool:
    return value is None or value == "" or isinstance(value, (bool, int, float))


def redact_text(text: str, token: str | None = None) -> str:
    """``text`` with ``token`` (when given, 4+ characters) and anything shaped like a Hugging Face token or an HTTP
    bearer credential replaced by ``"<redacted>"``."""
    if token and len(token) >= 4:
        text = text.replace(token, REDACTED)
    text = _HF_TOKEN_PATTERN.sub(REDACTED, text)
    return re.sub(r"(?i)(bearer\s+)\S+", r"\1" + REDACTED, text)
