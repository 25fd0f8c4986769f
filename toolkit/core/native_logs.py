"""The frameworks' native start-up lines, held back so the first screen is the toolkit's.

TensorFlow's absl C++ logging (no ``absl::InitializeLog``) ignores ``TF_CPP_MIN_LOG_LEVEL`` while
loading: :func:`held` catches fd 2 then and writes back all but start-up noise."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import tempfile
from collections.abc import Iterator

from toolkit.core.files import private_dir

__all__ = ["configure", "held"]

LEVEL_VAR = "TF_CPP_MIN_LOG_LEVEL"
QUIET_LEVEL = "2"  # INFO and WARNING out; errors stay

# absl's lines: INFO and WARNING are start-up chatter; an error only where it says "no GPU here".
_ABSL = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [\w./-]+:\d+\] ")
_CHATTER = re.compile(r"^[IW]\d{4} ")
_NO_GPU = re.compile(
    r"cuInit|cuda_platform|Unable to register cu(DNN|FFT|BLAS) factory|TF-TRT Warning"
)
# Errors a caller says again in its own words, and XProf's converter's error that is none.
_SAID = re.compile(
    r"add_port\.cc:\d+\] Failed to add port|No UnifiedProfileProcessor registered for tool"
)
# PyTorch's libkineto marks each profiler start and stop on stderr from C++.
_KINETO_MARK = re.compile(
    r"^USDT:\d{4}-\d\d-\d\d [\d:]+ \d+:\d+ \w+\.cpp:\d+\] profiler_(start|stop)$"
)
_PLAIN = (
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "To enable the following instructions:",  # the second line of cpu_feature_guard's INFO
)

_state = {"hold": True}


def configure(verbosity: int = -1, env: dict[str, str] | None = None) -> bool:
    """Decides, before any framework loads, whether start-up lines are held (returned). Sets
    ``TF_CPP_MIN_LOG_LEVEL`` unless set: ``2``, or ``0`` where `verbosity` >= 0."""
    env = os.environ if env is None else env
    verbose = verbosity >= 0
    if verbose:
        env.setdefault(LEVEL_VAR, "0")
    else:
        env.setdefault(LEVEL_VAR, QUIET_LEVEL)
    try:
        level = int(env[LEVEL_VAR])
    except ValueError:
        level = 0
    _state["hold"] = not verbose and level >= int(QUIET_LEVEL)
    _matplotlib_config(env)
    if _state["hold"]:  # JAX's own INFO lines (no TPU here, the distributed service's start)
        logging.getLogger("jax").setLevel(logging.WARNING)
        # TFDS's chatter through absl's logger, before the toolkit's own line.
        absl = logging.getLogger("absl")
        if _quiet_tfds not in absl.filters:
            absl.addFilter(_quiet_tfds)
    return _state["hold"]


def _matplotlib_config(env: dict[str, str] | os._Environ[str]) -> None:
    """A private matplotlib config directory where its own cannot be made (a read-only home)."""
    if "MPLCONFIGDIR" in env:
        return
    base = env.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    where = os.path.join(base, "matplotlib")
    while not os.path.exists(where) and os.path.dirname(where) != where:
        where = os.path.dirname(where)
    if not os.access(where, os.W_OK):  # one directory per user, reused by every process
        uid = os.getuid() if hasattr(os, "getuid") else "user"
        shared = private_dir(f"keras-perf-matplotlib-{uid}")
        if shared is None:  # taken by someone else, or none can be made: matplotlib's own
            return  # temporary directory then (it says so itself), never theirs
        env["MPLCONFIGDIR"] = shared


def _quiet_tfds(record: logging.LogRecord) -> bool:
    """absl's logger keeps TFDS's errors only (while start-up lines are held)."""
    return record.levelno >= logging.ERROR or "tensorflow_datasets" not in record.pathname


def is_noise(line: str) -> bool:
    """Whether `line` is a framework's start-up chatter (never an error that matters)."""
    text = line.rstrip("\r\n")
    if text.startswith(_PLAIN) or _KINETO_MARK.match(text):
        return True
    if _ABSL.match(text):
        return bool(_CHATTER.match(text) or _NO_GPU.search(text) or _SAID.search(text))
    return False


@contextlib.contextmanager
def held() -> Iterator[None]:
    """Holds fd 2 inside the block, then writes back every line not :func:`is_noise`, even when
    it raises. A no-op when showing everything or where fd 2 cannot be duplicated."""
    if not _state["hold"]:
        yield
        return
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):
        yield
        return
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            text = sink.read().decode("utf-8", errors="replace")
            kept = [line for line in text.splitlines(keepends=True) if not is_noise(line)]
            if kept:
                with contextlib.suppress(OSError, ValueError):
                    sys.stderr.write("".join(kept))
                    sys.stderr.flush()
