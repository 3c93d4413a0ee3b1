"""`training.host_memory.retain_freed_memory`: glibc's mmap and trim thresholds raised on a CPU run, or left alone."""

from trl_grpo_ext.training import host_memory
from trl_grpo_ext.training.host_memory import retain_freed_memory


class FakeLibc:
    """A C library whose ``mallopt`` records its calls and answers ``answer`` (glibc: 1 on success, 0 on failure)."""

    def __init__(self, answer=1):
        self.calls, self.answer = [], answer

    def mallopt(self, parameter, value):
        self.calls.append((parameter, value))
        return self.answer


def test_sets_both_thresholds_on_linux():
    libc = FakeLibc()
    assert retain_freed_memory({}, "linux", libc) == host_memory.RETAINED
    # glibc's malloc.h: M_MMAP_THRESHOLD is -3, M_TRIM_THRESHOLD is -1; 1 GiB and 2 GiB - 1 (the largest int)
    assert libc.calls == [(-3, 1_073_741_824), (-1, 2_147_483_647)]


def test_the_switch_and_the_users_own_settings_leave_malloc_alone():
    for environ in ({"TRL_GRPO_EXT_RETAIN_MEMORY": "0"}, {"TRL_GRPO_EXT_RETAIN_MEMORY": "off"},
                    {"MALLOC_TRIM_THRESHOLD_": "0"}, {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=65536"}):
        libc = FakeLibc()
        assert retain_freed_memory(environ, "linux", libc).startswith("left as is"), environ
        assert libc.calls == [], environ
    libc = FakeLibc()  # a tunable of another glibc component is not a malloc setting
    assert retain_freed_memory({"GLIBC_TUNABLES": "glibc.pthread.rseq=0"}, "linux", libc) == host_memory.RETAINED


def test_a_switch_that_is_neither_on_nor_off_is_refused():
    import pytest

    for value in ("1", "true", "ON", " yes "):
        assert retain_freed_memory({"TRL_GRPO_EXT_RETAIN_MEMORY": value}, "linux", FakeLibc()) == host_memory.RETAINED
    with pytest.raises(ValueError, match=r"TRL_GRPO_EXT_RETAIN_MEMORY='maybe' is neither on nor off\. Fix: unset it"):
        retain_freed_memory({"TRL_GRPO_EXT_RETAIN_MEMORY": "maybe"}, "linux", FakeLibc())


def test_other_platforms_and_refusals():
    libc = FakeLibc()
    assert retain_freed_memory({}, "darwin", libc) == "left as is (not Linux)" and libc.calls == []
    assert retain_freed_memory({}, "linux", FakeLibc(answer=0)) == "left as is (mallopt refused the thresholds)"
    assert retain_freed_memory({}, "linux", object()) == "left as is (the C library has no mallopt)"


_FAULTS = """
import ctypes, resource, sys
from trl_grpo_ext.training.host_memory import retain_freed_memory
print(retain_freed_memory({}) if sys.argv[1] == "retain" else "default", file=sys.stderr)
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
size = 64 << 20  # above glibc's largest default mmap threshold (32 MiB): mmap'ed and unmapped on free by default
faults = []
for _ in range(5):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    block = libc.malloc(size)
    ctypes.memset(block, 1, size)  # touch every page, as a tensor's first write does
    libc.free(ctypes.c_void_p(block))
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(*faults)
"""


def _faults(mode):
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _FAULTS, mode], capture_output=True, text=True, check=True)
    return [int(n) for n in out.stdout.split()], out.stderr.strip()


def test_a_freed_block_is_reused_without_faulting_its_pages_in_again():
    """On this machine's glibc, in a fresh process: 5 rounds of malloc, touch and free of 64 MiB. By default every
    round faults its 16,384 pages of 4 KiB in again; retained, only the first does."""
    pages = (64 << 20) // 4096
    default, _ = _faults("default")
    retained, note = _faults("retain")
    assert note == host_memory.RETAINED
    assert all(n >= 0.99 * pages for n in default), default
    assert retained[0] >= 0.99 * pages and all(n < pages // 100 for n in retained[1:]), retained
