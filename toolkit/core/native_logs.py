"""The frameworks' native start-up lines, held back so the first screen is the toolkit's.

TensorFlow 2.21 logs through absl's C++ logging and never calls ``absl::InitializeLog``, so
the lines it writes while its libraries load (oneDNN, "Could not find cuda drivers", the CPU
instructions it was not built for) reach stderr whatever ``TF_CPP_MIN_LOG_LEVEL`` says, and
its first device listing adds ``failed call to cuInit`` as an error on every machine without
a GPU. ``TF_CPP_MIN_LOG_LEVEL=2`` does quiet what comes later (the profiler's ``delay_ms``
warnings, XLA's "Compiled cluster" notes).

So :func:`held` catches file descriptor 2 (C++ writes there, not to ``sys.stderr``) for the
few calls that load a framework, and writes back every line that is not start-up noise:
an error that matters still shows, once the call returns. It holds nothing when the user
asked to see the framework's logs: ``TF_CPP_MIN_LOG_LEVEL`` set below 2 in the environment,
or ``--verbosity`` (``-v``) 0 or more on the command line (:func:`configure`). JAX's own INFO
lines (no TPU found, its distributed service starting) are held back the same way, by its
``jax`` logger's level."""

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

# absl's lines: a severity letter, MMDD, the time, the thread, file:line]. INFO and WARNING
# lines are start-up chatter; an error line is noise only where it says "no GPU here".
_ABSL = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [\w./-]+:\d+\] ")
_CHATTER = re.compile(r"^[IW]\d{4} ")
_NO_GPU = re.compile(
    r"cuInit|cuda_platform|Unable to register cu(DNN|FFT|BLAS) factory|TF-TRT Warning"
)
# Errors a caller says again in its own words (data-service: a --port it cannot listen on),
# and XProf's converter's error that is none (its trace_viewer tool is served another way).
_SAID = re.compile(
    r"add_port\.cc:\d+\] Failed to add port|No UnifiedProfileProcessor registered for tool"
)
# PyTorch's libkineto marks each profiler start and stop on stderr from C++ (86 columns, past
# an 80-column terminal), at a severity above its errors: KINETO_LOG_LEVEL could hide them
# only with its errors, and only if set before torch loads.
_KINETO_MARK = re.compile(
    r"^USDT:\d{4}-\d\d-\d\d [\d:]+ \d+:\d+ \w+\.cpp:\d+\] profiler_(start|stop)$"
)
_PLAIN = (
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "To enable the following instructions:",  # the second line of cpu_feature_guard's INFO
)

_state = {"hold": True}


def configure(verbosity: int = -1, env: dict[str, str] | None = None) -> bool:
    """Decides, before any framework loads, whether start-up lines are held; returns it.

    Sets ``TF_CPP_MIN_LOG_LEVEL=2`` unless the environment already sets it (the user's choice
    stands) or absl's `verbosity` (``--verbosity``, read at the start:
    ``toolkit._argv.start_flags``) is 0 or more (then ``0``: everything shows)."""
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
        # TFDS's through absl's logger (its namespace config, a package index it cannot
        # reach offline, the split it constructs): chatter before the toolkit's own line.
        absl = logging.getLogger("absl")
        if _quiet_tfds not in absl.filters:
            absl.addFilter(_quiet_tfds)
    return _state["hold"]


def _matplotlib_config(env: dict[str, str] | os._Environ[str]) -> None:
    """Where matplotlib's config directory cannot be made (a read-only home), a temporary
    one, as matplotlib would pick, without its two warning lines before the toolkit's own:
    private to this user (:func:`toolkit.core.files.private_dir`), since matplotlib reads
    its config (``matplotlibrc``) and font cache from there."""
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
    """Holds what is written to file descriptor 2 inside the block; afterwards writes back
    every line that is not :func:`is_noise`, even when the block raises.

    A no-op when :func:`configure` decided to show everything, or where fd 2 cannot be
    duplicated (an embedding host without one)."""
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
