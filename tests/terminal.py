"""Runs a command in a real pseudo-terminal of a given size and renders what it drew.

The screen is rendered by pyte (a VT100 emulator, the test extra), so a test sees what a
person sees: carriage returns and cursor moves applied, lines that wrapped at the terminal's
width, the bar's last state. ``run_in_terminal`` reads until the process ends (never a sleep),
so it holds on a loaded machine.
"""

from __future__ import annotations

import os
import pty
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from dataclasses import dataclass, field
from fcntl import ioctl

from tests.helpers import signals_at


@dataclass
class Screen:
    """What the terminal showed: `lines` (the whole history and the last screen, trailing
    blanks cut), `wrapped` (each row that a too-long line ran past the right margin of,
    with the character that spilled over), `raw` (the bytes as text), `rc`."""

    columns: int
    lines: list[str]
    wrapped: list[str]
    raw: str
    rc: int | None
    timed_out: bool = False
    first_output_s: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def run_in_terminal(
    argv: list[str],
    columns: int,
    rows: int = 50,
    timeout: float = 300,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
) -> Screen:
    """Runs `argv` with stdin, stdout and stderr on one pseudo-terminal `columns` wide, reads
    everything until it exits (or `timeout`, then it is killed) and renders it with pyte."""
    import pyte

    screen = pyte.HistoryScreen(columns, rows, history=20000, ratio=0.5)
    screen.set_mode(pyte.modes.LNM)  # a pty turns \n into \r\n (onlcr); the same here
    stream = pyte.ByteStream(screen)
    wrapped: list[str] = []
    _track_wraps(screen, wrapped)

    primary, secondary = pty.openpty()
    ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    full_env = dict(os.environ if env is None else env)
    full_env.update({"COLUMNS": str(columns), "LINES": str(rows), "TERM": "xterm"})
    full_env.pop("TOOLKIT_PROGRESS", None)
    began = time.monotonic()
    proc = subprocess.Popen(
        signals_at(list(argv)),  # a terminal's ^C and ^\\ must reach it, whatever we inherited
        stdin=secondary,
        stdout=secondary,
        stderr=secondary,
        env=full_env,
        cwd=cwd,
        start_new_session=True,
        close_fds=True,
    )
    os.close(secondary)
    raw = bytearray()
    first = None
    timed_out = False
    try:
        while True:
            if time.monotonic() - began > timeout:
                timed_out = True
                os.killpg(proc.pid, signal.SIGKILL)
                break
            ready, _, _ = select.select([primary], [], [], 1.0)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # EIO: the last writer closed
                break
            if not chunk:
                break
            if first is None:
                first = time.monotonic() - began
            raw += chunk
            stream.feed(chunk)
    finally:
        os.close(primary)
        try:
            rc = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            rc = proc.wait()
    lines = [_row(line, columns) for line in screen.history.top]
    lines += [screen.display[i].rstrip() for i in range(rows)]
    while lines and not lines[-1]:
        lines.pop()
    return Screen(
        columns=columns,
        lines=lines,
        wrapped=wrapped,
        raw=raw.decode("utf-8", "replace"),
        rc=rc,
        timed_out=timed_out,
        first_output_s=first,
    )


def _row(line, columns: int) -> str:
    return "".join(line[x].data for x in range(columns)).rstrip()


def _track_wraps(screen, wrapped: list[str]) -> None:
    """Records each time a line runs past the right margin and wraps onto the next row (pyte
    wraps as a terminal does, in DECAWM mode): the row that overflowed, as it read then."""
    import pyte

    draw = screen.draw

    def watching_draw(data: str) -> None:
        for char in data:
            if screen.cursor.x == screen.columns and pyte.modes.DECAWM in screen.mode:
                wrapped.append(_row(screen.buffer[screen.cursor.y], screen.columns) + char)
            draw(char)

    screen.draw = watching_draw


if __name__ == "__main__":  # python tests/terminal.py COLUMNS cmd...: what a person would see
    shown = run_in_terminal(sys.argv[2:], int(sys.argv[1]))
    print("\n".join(shown.lines))
    print(f"-- rc {shown.rc}, first output {shown.first_output_s}, wrapped {shown.wrapped}")
