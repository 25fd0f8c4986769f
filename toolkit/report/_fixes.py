"""A fix spelled for who reads it: the report's edge of the ledger's fixes (the rules and their
records are ``toolkit.profiling._fixes``). A runner setting is spelled as its flag
(``--validation_freq=5``) for a run the runner set up, through the runner's spelling (handed in
as `spell`: the report sits below the runner); anything else as Python."""

from __future__ import annotations

from typing import Any

from toolkit.core._advice import Spell
from toolkit.core.stats import format_s
from toolkit.profiling._fixes import Fix, Setting, Unfixed, part_share
from toolkit.profiling._ledger_records import Ledger


def python_spelling(setting: Setting) -> str:
    """`setting` as a script sets it: ``model.fit(..., validation_freq=5)``."""
    if setting.python:
        return setting.python
    arg = f"{setting.name}={setting.value!r}"
    if setting.call:
        return f"{setting.call}(..., {arg})"
    return f"{arg} {setting.place}" if setting.place else arg


def spelled(setting: Setting, spell: Spell | None = None) -> str:
    """`setting` for its reader: through `spell` (the runner's flags) where it can, else Python."""
    if setting.runner and spell is not None:
        try:
            return spell({setting.name: setting.value})
        except (KeyError, ValueError, TypeError):  # a setting `spell` does not know
            pass
    return python_spelling(setting)


def fix_text(fix: Fix, spell: Spell | None = None) -> str:
    """The fix alone: ``--validation_freq=5``, ``--nojit_compile, or a longer run``."""
    parts = [spelled(fix.setting, spell)] if fix.setting is not None else []
    parts += [fix.action] if fix.action else []
    return ", ".join(parts)


def fix_words(fix: Fix, spell: Spell | None = None) -> str:
    """The finding, the fix and what it saves, in one sentence for its reader."""
    words = f"{fix.why}: {fix_text(fix, spell)}"
    if fix.saves_s is not None:  # a setting saves; an action in words: that saves
        words += f"{'' if fix.setting is not None else '; that'} saves ~{format_s(fix.saves_s)}"
    return f"{words} {fix.note}" if fix.note else words


def fix_json(fix: Fix, spell: Spell | None = None) -> dict[str, Any]:
    """``report.json``'s record of a fix: item, seconds, saving, words for its reader, setting."""
    out: dict[str, Any] = {
        "item": fix.item,
        "seconds": round(fix.seconds, 6),
        "saves_s": round(fix.saves_s, 6) if fix.saves_s is not None else None,
        "fix": fix_text(fix, spell),
        "words": fix_words(fix, spell),
        "setting": fix.setting.name if fix.setting is not None else None,
        "value": fix.setting.value if fix.setting is not None else None,
    }
    if fix.break_even_ms is not None:
        out["break_even_ms"] = round(fix.break_even_ms, 6)
    return out


def unfixed_words(found: Unfixed, ledger: Ledger, spell: Spell | None = None) -> str:
    """``none for compile (43%): <the rule applied>``, the part's share as the table's."""
    label = found.part.replace("_", "-")
    rule = found.rule
    for name, setting in found.names:
        rule = rule.replace("{" + name + "}", spelled(setting, spell))
    return f"none for {label} ({part_share(ledger, found.part)}): {rule}"
