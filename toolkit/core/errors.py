"""One line for an error: what a user reads in place of a traceback.

TensorFlow's runtime errors open with the stack of the graph that failed ("Graph execution
error: Detected at node ... defined at (most recent call last): File ...") and say what went
wrong last, followed by ``[[{{node ...}}]]``; Keras wraps an error raised in a layer as
"Exception encountered when calling X.call()." with the message below it in bold; other errors
say it first.
"""

from __future__ import annotations

import re

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
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def what_went_wrong(error: BaseException, limit: int = 300) -> str:
    """The line of `error`'s message that says what went wrong, at most `limit` characters."""
    message = _ANSI.sub("", getattr(error, "message", None) or str(error))
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    useful = [line for line in lines if not line.startswith(_NOISE)]
    if type(error).__module__.startswith("tensorflow"):
        text = useful[-1] if useful else (lines[-1] if lines else "")
        # "{{function_node __wrapped__...}} corrupted record at 15662 [Op:IteratorGetNext]"
        if text.startswith("{{function_node") and "}}" in text:
            text = text.split("}}", 1)[1]
        text = text.split(" [Op:", 1)[0].strip()
    else:
        text = useful[0] if useful else (lines[0] if lines else "")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def one_line(error: BaseException, limit: int = 300) -> str:
    """`error` as ``Type: what went wrong`` on one line."""
    text = what_went_wrong(error, limit)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
