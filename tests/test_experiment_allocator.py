"""keep_freed_memory: glibc's thresholds set once per process, a reason when they cannot be, and
the setting that makes a large block freed and allocated again reuse its pages (no new faults)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from fedsim.experiment import allocator

SCRIPT = textwrap.dedent('''
    import resource, sys
    import numpy as np
    from fedsim.experiment.allocator import keep_freed_memory
    if sys.argv[1] == "set":
        assert keep_freed_memory() == "set"
        assert keep_freed_memory() == "set"  # once per process, the same answer
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(10):  # a FedAvg round in small: 30 models of 3.7 MB written, held, then freed
        held = []
        for _ in range(30):
            b = np.empty(3_700_000 // 8)
            b[:] = 1.0
            held.append(b)
        del held, b
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
''')


def _faults(mode, env=None):
    out = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.strip())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mallopt is glibc's (Linux)")
def test_freed_blocks_are_reused_without_page_faults():
    default, kept = _faults("default"), _faults("set")
    # default glibc: the freed blocks go back to the kernel (unmapped, or trimmed off the heap's
    # top), so every round faults its pages in again (~900 per block); kept: the first round only
    pages = 30 * 3_700_000 // 4096
    assert default > 5 * pages, (default, kept)
    assert kept < 1.5 * pages, (default, kept)


def test_the_environment_can_leave_the_allocator_alone(monkeypatch):
    monkeypatch.setattr(allocator, "_done", None)
    monkeypatch.setenv("FEDSIM_MALLOC", "default")
    assert "FEDSIM_MALLOC=default" in allocator.keep_freed_memory()
    monkeypatch.setattr(allocator, "_done", None)  # (the real setting is left for the process)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mallopt is glibc's (Linux)")
def test_setting_the_thresholds_starts_no_process(monkeypatch):
    # ctypes.util.find_library("c") ran /sbin/ldconfig in a subprocess on every `fedsim` start:
    # milliseconds of start-up, and a child process beside the TCP transport's workers
    def refuse(*args, **kwargs):
        raise RuntimeError(f"a process was started: {args[:1]}")

    monkeypatch.setattr(subprocess, "Popen", refuse)
    monkeypatch.delenv("FEDSIM_MALLOC", raising=False)
    assert allocator._set() == "set"
