"""One line for an error: what a user reads in place of a traceback.

TensorFlow's errors say what went wrong last, before ``[[{{node ...}}]]``; Keras wraps a layer's
error in "Exception encountered when calling X.call()."; others say it first. A user's exception
inside tf.data reaches the caller as ``UnknownError``, its traceback only as text."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import sysconfig
import traceback
from collections.abc import Iterable

__all__ = [
    "one_line",
]

_NOISE = (
    "[[",
    "File ",
    "Detected at node",
    "Graph execution error",
    "{{function_node",
    "Exception encountered when calling",
)
_KERAS_CALL = "Exception encountered when calling "
_ARGUMENTS = "Arguments received by "
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_TRACEBACK = "Traceback (most recent call last):"
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<function>\S+)')
_RAISED = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)(?::(?P<message>.*))?$")
_HERE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The toolkit's own code (its recipes too): an error raised there is the toolkit's to say.
_OURS = tuple(os.path.join(_HERE, package, "") for package in ("toolkit", "recipes"))
# Python's and the installed packages' frames: those a user's code is called through.
_LIBRARIES = tuple(
    os.path.join(os.path.abspath(path), "")
    for key in ("stdlib", "platstdlib", "purelib", "platlib")
    if (path := sysconfig.get_paths().get(key))
)


def what_went_wrong(error: BaseException, limit: int = 300) -> str:
    """`error`'s line saying what went wrong (at most `limit` chars), with the Keras layer named."""
    message = _ANSI.sub("", getattr(error, "message", None) or str(error))
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    lines, where = _inside_keras_call(lines)
    text = _gist(error, lines)
    said = f" (in {where})" if text and where else ""
    return _cut(text, limit - len(said)) + said


def _inside_keras_call(lines: list[str]) -> tuple[list[str], str | None]:
    """The lines inside Keras's layer-call wrapper and ``X.call()``; `lines` and None without."""
    at = next((i for i, line in enumerate(lines) if line.startswith(_KERAS_CALL)), None)
    if at is None:
        return lines, None
    where = lines[at][len(_KERAS_CALL) :].removesuffix(".")
    end = next((i for i in range(at + 1, len(lines)) if lines[i].startswith(_ARGUMENTS)), None)
    return lines[at + 1 : end], where


def _gist(error: BaseException, lines: list[str]) -> str:
    useful = [line for line in lines if not line.startswith(_NOISE)]
    own = f"{type(error).__name__}: "
    if lines and lines[0] == "in user code:":  # autograph's: the frames, then the error's own
        at = next((i for i, line in enumerate(lines) if line.startswith(own)), None)
        if at is not None:  # read from there as any message (Keras's wrapper lines skipped)
            rest = [lines[at][len(own) :], *lines[at + 1 :]]
            found = [line for line in rest if line and not line.startswith(_NOISE)]
            return found[0] if found else rest[0]
    if type(error).__module__.startswith("tensorflow"):
        text = useful[-1] if useful else (lines[-1] if lines else "")
        # "{{function_node __wrapped__...}} corrupted record at 15662 [Op:IteratorGetNext]"
        if text.startswith("{{function_node") and "}}" in text:
            text = text.split("}}", 1)[1]
        return text.split(" [Op:", 1)[0].strip()
    return useful[0] if useful else (lines[0] if lines else "")


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def one_line(error: BaseException, limit: int = 300) -> str:
    """`error` as ``Type: what went wrong``; a Python exception TensorFlow wrapped as its own."""
    wrapped = _wrapped(error)
    if wrapped is not None:
        return _cut(wrapped.what(), limit)
    text = what_went_wrong(error, limit)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


@dataclasses.dataclass(frozen=True)
class UserRaise:
    """An exception raised in the user's own code, as Python would show it; `message` its first
    line, `file` relative to the working directory where under it."""

    type: str
    message: str
    file: str | None = None
    line: int | None = None
    function: str | None = None

    def what(self) -> str:
        """``KeyError: 'row 17 missing'``, as Python's last traceback line says it."""
        return f"{self.type}: {self.message}" if self.message else self.type

    def __str__(self) -> str:
        """``KeyError: 'row 17 missing' (raised in mydata.py:23, in __getitem__)``."""
        if self.file is None:
            return self.what()
        return f"{self.what()} (raised in {self.file}:{self.line}, in {self.function})"


def user_raise(error: BaseException) -> UserRaise | None:
    """The user's own exception in `error` (from TensorFlow's traceback text, else its own)."""
    wrapped = _wrapped(error)
    if wrapped is not None:
        return wrapped if wrapped.file is not None else None
    frames = traceback.extract_tb(error.__traceback__)
    where = _deepest((f.filename, f.lineno or 0, f.name) for f in frames)
    remote = getattr(error.__cause__, "tb", None)  # multiprocessing's RemoteTraceback
    if where is None and isinstance(remote, str):  # raised in a worker (a PyDataset's pool)
        where = _deepest(_frames(remote.splitlines()))
    if where is None:
        return None
    text = what_went_wrong(error)
    return UserRaise(type(error).__name__, text, *where)


def library_raise(error: BaseException) -> bool:
    """Whether a library (Keras, TensorFlow, JAX, optree) raised `error`, not the user or toolkit:
    what a model that does not run on this backend or data raises inside ``fit``."""
    if user_raise(error) is not None:
        return False
    if _KERAS_CALL in _ANSI.sub("", str(error)):  # Keras's wrapper: raised in a layer's call
        return True  # (its frames, filtered by Keras, may end in the toolkit's layer scopes)
    frames = traceback.extract_tb(error.__traceback__)
    return bool(frames) and _library(frames[-1].filename) and not _ours(frames[-1].filename)


_FIT = "_toolkit_in_your_fit"  # the attribute :func:`in_your_fit` marks an error with


def in_your_fit(error: BaseException, backend: str) -> None:
    """Marks library error `error` as raised in the user's model's fit on `backend`, for the CLI."""
    with contextlib.suppress(AttributeError, TypeError):  # a type that takes no attribute
        setattr(error, _FIT, backend)


def raised_in_your_fit(error: BaseException) -> str | None:
    """``your model's fit raised ValueError: ... (inside Keras's fit on jax)``, or None."""
    backend = getattr(error, _FIT, None)
    if backend is None:
        return None
    return f"your model's fit raised {one_line(error)} (inside Keras's fit on {backend})"


def _wrapped(error: BaseException) -> UserRaise | None:
    """The Python exception (and user frame) a TensorFlow error carries as text, or None."""
    if not type(error).__module__.startswith("tensorflow"):
        return None
    message = _ANSI.sub("", getattr(error, "message", None) or str(error))
    if _TRACEBACK not in message:
        return None
    lines = message.rsplit(_TRACEBACK, 1)[1].splitlines()
    frames = [(i, m) for i, line in enumerate(lines) if (m := _FRAME.match(line))]
    if not frames:
        return None
    last = frames[-1][0]
    said = next((ln for ln in lines[last + 1 :] if ln.strip() and not ln[0].isspace()), None)
    raised = _RAISED.match(said.strip()) if said else None
    if raised is None:
        return None
    # The user's frame from every traceback held (a PyDataset worker's precedes the last).
    where = _deepest(_frames(message.split(_TRACEBACK, 1)[1].splitlines())) or (None, None, None)
    kind = raised["type"].rsplit(".", 1)[-1]  # "mydata.RowMissing": as type(e).__name__
    return UserRaise(kind, _cut((raised["message"] or "").strip(), 300), *where)


def _frames(lines: Iterable[str]) -> Iterable[tuple[str, int, str]]:
    """``(file, line, function)`` of each frame a traceback's text names, in its order."""
    for line in lines:
        if m := _FRAME.match(line):
            yield m["file"], int(m["line"]), m["function"]


def _deepest(frames: Iterable[tuple[str, int, str]]) -> tuple[str, int, str] | None:
    """The deepest of `frames` neither Python's nor a library's, if the user's; else None."""
    deepest = None
    for file, line, function in frames:
        if _ours(file) or not _library(file):
            deepest = (file, line, function)
    if deepest is None or _ours(deepest[0]):
        return None
    return _shown(deepest[0]), deepest[1], deepest[2]


def written_by_user(file: str) -> bool:
    """Whether `file` is the user's: not the toolkit's, Python's or an installed package's."""
    return not _ours(file) and not _library(file)


def _ours(file: str) -> bool:
    """Whether `file` is the toolkit's or its recipes' (installed as a package or not)."""
    return not file.startswith("<") and os.path.abspath(file).startswith(_OURS)


def _library(file: str) -> bool:
    """Whether `file` is Python's own or an installed package's (not the toolkit's)."""
    if file.startswith("<frozen"):
        return True
    path = os.path.abspath(file) if not file.startswith("<") else file
    parts = path.split(os.sep)
    return path.startswith(_LIBRARIES) or "site-packages" in parts or "dist-packages" in parts


def _shown(file: str) -> str:
    """`file` as a user finds it: relative to the working directory when it is under it."""
    if file.startswith("<"):
        return file
    try:
        path, here = os.path.abspath(file), os.path.join(os.getcwd(), "")
    except OSError:  # a working directory removed since: the path as Python gave it
        return file
    return os.path.relpath(path) if path.startswith(here) else path
