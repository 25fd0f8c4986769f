"""This process's host memory, read cheaply enough to read often: the resident set and the
kernel's high-water mark, in MiB (2**20 bytes).

One place for both, so no caller mixes units (``ru_maxrss`` is KiB on Linux, bytes on macOS)
and every reader pays what the memory thread pays. On Linux the resident set is one
``pread`` of ``/proc/self/statm`` on a descriptor kept open (3 µs here); psutil, which
builds a ``Process`` and opens, reads and closes the file each time, took 150-180 µs a
reading beside a fit on one core (each syscall handing the interpreter's lock to the fit and
waiting to get it back), and the 50 ms memory thread was most of StepTimer's cost
(``benchmarks/profiler_overhead.py``). Elsewhere psutil reads it."""

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
    """The kernel's high-water mark of the resident set since the process started
    (``getrusage``'s ``ru_maxrss``; it never goes back down)."""
    peak = float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    return peak / MIB if sys.platform == "darwin" else peak / 1024.0


def high_water_mb() -> float:
    """The high-water mark that Linux can set back (``VmHWM``, reset by writing 5 to
    ``/proc/self/clear_refs``): a peak measured from a chosen moment; elsewhere
    :func:`maxrss_mb`."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return float(line.split()[1]) / 1024.0
    except OSError:
        pass
    return maxrss_mb()
