"""This process's host memory, cheap to read often: resident set and high-water mark, in MiB.

One place, so no caller mixes units (``ru_maxrss`` is KiB on Linux, bytes on macOS). On Linux, one
``pread`` of ``/proc/self/statm`` on a kept descriptor: psutil's open-read-close hands the fit the
interpreter's lock at every syscall, costing StepTimer most. Elsewhere psutil reads it."""

from __future__ import annotations

import os
import resource
import sys
import threading

MIB = 1024.0 * 1024.0
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

_lock = threading.Lock()
_statm: tuple[int, int] | None = None  # (pid that opened it, descriptor): a fork reopens


def _statm_fd() -> int | None:
    global _statm
    pid = os.getpid()
    with _lock:
        if _statm is not None and _statm[0] == pid:
            return _statm[1]
        try:
            fd = os.open("/proc/self/statm", os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return None
        _statm = (pid, fd)  # a forked child's inherited one names its parent: left alone
        return fd


def resident_mb() -> float:
    """The resident set now."""
    fd = _statm_fd()
    if fd is not None:
        try:
            return int(os.pread(fd, 128, 0).split()[1]) * _PAGE / MIB
        except (OSError, IndexError, ValueError):
            pass
    import psutil

    return psutil.Process().memory_info().rss / MIB


def maxrss_mb() -> float:
    """The kernel's resident high-water mark since start (``ru_maxrss``: never goes down)."""
    peak = float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    return peak / MIB if sys.platform == "darwin" else peak / 1024.0


def high_water_mb() -> float:
    """The high-water mark Linux can reset (``VmHWM``; write 5 to ``/proc/self/clear_refs``): a
    peak from a chosen moment. Elsewhere :func:`maxrss_mb`."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return float(line.split()[1]) / 1024.0
    except OSError:
        pass
    return maxrss_mb()
