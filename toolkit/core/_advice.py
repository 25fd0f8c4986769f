"""Advice as a record: the words, and the settings to try as values.

A room knows *what* to try, a setting and a value; the reader decides the spelling (flags or
Python), so advice leaves the room as an :class:`Advice`, spelled only at the edge by `spell`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

# A setting's value: a flag's, a placeholder the reader chooses ("K"), or None (the config's own).
Setting = bool | int | float | str | None
# A speller: settings (TrainConfig field -> value) as one piece of text a reader acts on.
Spell = Callable[[Mapping[str, Setting]], str]


@dataclasses.dataclass(frozen=True)
class Advice:
    """One piece of advice: `text` with ``{0}``, ``{1}``... where each of `tries` is spelled; a
    try is settings tried together, as (TrainConfig field, value) pairs."""

    text: str
    tries: tuple[tuple[tuple[str, Setting], ...], ...] = ()

    @classmethod
    def of(cls, text: str, *tries: Mapping[str, Setting]) -> Advice:
        return cls(text, tuple(tuple(t.items()) for t in tries))

    @property
    def settings(self) -> tuple[dict[str, Setting], ...]:
        """Each try as a mapping (field -> value)."""
        return tuple(dict(t) for t in self.tries)

    def after(self, words: str) -> Advice:
        """The same advice with `words` said before it (plain words, braces and all)."""
        if self.tries:
            words = words.replace("{", "{{").replace("}", "}}")
        return Advice(words + self.text, self.tries)

    def spelled(self, spell: Spell) -> str:
        """The advice as its reader acts on it, each try spelled by `spell`."""
        if not self.tries:
            return self.text
        return self.text.format(*(spell(t) for t in self.settings))

    def __str__(self) -> str:  # a log's line: the settings as field=value
        return self.spelled(lambda t: " ".join(f"{k}={v}" for k, v in t.items()))

    def to_dict(self) -> dict[str, object]:
        """The record as JSON: `text` with its ``{0}`` placeholders, `tries` as objects."""
        return {"text": self.text, "tries": [dict(t) for t in self.tries]}

    @classmethod
    def from_dict(cls, d: Any) -> Advice:
        """:meth:`to_dict`'s layout read back (a plain string: its text); else ValueError."""
        if isinstance(d, str):
            return cls(d)  # no tries: said as it is, braces and all
        if not isinstance(d, Mapping) or not isinstance(d.get("text"), str):
            raise ValueError(f"expected advice as {{text, tries}}, got {d!r}")
        tries = d.get("tries", [])
        if not isinstance(tries, list) or not all(
            isinstance(t, Mapping) and all(isinstance(k, str) for k in t) for t in tries
        ):
            raise ValueError(f"expected advice's tries as a list of settings, got {tries!r}")
        return cls.of(d["text"], *tries)
