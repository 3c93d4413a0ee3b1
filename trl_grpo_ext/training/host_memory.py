"""Keep freed host memory in the process on a CPU run (glibc ``mallopt``), instead of handing it back to the kernel.

A GRPO step on a CPU frees and re-allocates gigabytes of activations, logits and KV cache every step. glibc's malloc
serves blocks above its mmap threshold (at most 32 MiB by default) with fresh ``mmap`` calls and unmaps them on free,
and trims the heap's free top: every step then faults its memory in again, one 4 KiB page at a time, each page zeroed
by the kernel. Raising the mmap threshold and the trim threshold (glibc's ``M_MMAP_THRESHOLD`` and
``M_TRIM_THRESHOLD``, `mallopt(3)`) lets malloc reuse the freed blocks. Measured in docs/benchmarks.md.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

#: `mallopt(3)` parameters (glibc's malloc.h).
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
#: Blocks below this are served from the heap and reused after free [bytes]: 1 GiB.
MMAP_THRESHOLD = 1 << 30
#: Free memory at the heap's top kept before trimming [bytes]: 2 GiB - 1 (mallopt takes an int).
TRIM_THRESHOLD = (1 << 31) - 1
#: Set to ``0`` to leave malloc as it is.
ENV_SWITCH = "TRL_GRPO_EXT_RETAIN_MEMORY"
#: What `retain_freed_memory` returns when it set both thresholds.
RETAINED = (f"freed memory kept for reuse (glibc mallopt: mmap threshold {MMAP_THRESHOLD >> 30} GiB, trim threshold "
            f"{(TRIM_THRESHOLD + 1) >> 30} GiB; {ENV_SWITCH}=0 turns it off)")
#: The user's own malloc settings, which this leaves alone.
USER_MALLOC_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")


def retain_freed_memory(environ=None, platform: str | None = None, libc=None) -> str:
    """Raise glibc's mmap and trim thresholds for this process (call it before the model loads).

    Args:
        environ (`Mapping[str, str]`, defaults to `os.environ`): ``TRL_GRPO_EXT_RETAIN_MEMORY=0`` switches it off;
            ``MALLOC_*_`` variables or a ``glibc.malloc`` tunable in ``GLIBC_TUNABLES`` leave the user's settings.
        platform (`str`, defaults to `sys.platform`): anything but ``linux`` does nothing.
        libc: a loaded C library with ``mallopt`` (defaults to the process's own, found by `ctypes.util`).

    Returns:
        `str`: what was done, for the log (`RETAINED` when both thresholds were set).

    Raises:
        ValueError: ``TRL_GRPO_EXT_RETAIN_MEMORY`` is neither ``1``/``true``/``yes``/``on`` nor ``0``/``false``/``no``/``off``.
    """
    environ = os.environ if environ is None else environ
    switch = environ.get(ENV_SWITCH, "1").strip().lower()
    if switch in ("0", "false", "no", "off"):
        return f"left as is ({ENV_SWITCH}={environ[ENV_SWITCH]})"
    if switch not in ("1", "true", "yes", "on"):
        raise ValueError(f"{ENV_SWITCH}={environ[ENV_SWITCH]!r} is neither on nor off. Fix: unset it or use 1 (keep "
                         "freed memory for reuse, the default on a CPU), or 0 (glibc's own malloc settings).")
    if any(name in environ for name in USER_MALLOC_SETTINGS) or "glibc.malloc" in environ.get("GLIBC_TUNABLES", ""):
        return "left as is (the environment sets malloc's own settings)"
    if (platform or sys.platform) != "linux":
        return "left as is (not Linux)"
    if libc is None:
        name = ctypes.util.find_library("c")
        try:
            libc = ctypes.CDLL(name or "libc.so.6")
        except OSError:
            return "left as is (no C library found)"
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is None:  # musl and other C libraries without mallopt
        return "left as is (the C library has no mallopt)"
    done = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    return RETAINED if done else "left as is (mallopt refused the thresholds)"
