"""Opening a project whose voices this library lacks: the plan of `state.project_voices`, carried out, with a
question where it cannot decide (which library voice, or the project's own copy, stands for a voice).

The voices missing are found, and the project's takes remapped to the voices chosen, on the thread that reads
the project (`missing_voices`, `remap`: a walk over a book's takes each); here only what needs the person or the
library's folder: the questions and the imports."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from PySide6.QtWidgets import QInputDialog, QWidget

from s2studio.errors import UserError, printable
from s2studio.state.project_voices import Missing, plan
from s2studio.state.voices import Voice, VoiceLibrary

logger = logging.getLogger(__name__)

IMPORT = "import"


def _clips(n: int) -> str:
    return f"{n} clip{'s' * (n != 1)}"


def choices(m: Missing) -> list[tuple[str, str | None]]:
    """What the person may choose for `m`: (label, library voice id | IMPORT | None for no voice)."""
    out: list[tuple[str, str | None]] = []
    if m.packed_voice is not None:
        out.append((f"The project's own copy of “{printable(m.packed_voice.name, 60)}” "
                    f"({_clips(len(m.packed_voice.clips))}): add it to the library", IMPORT))
    for v in m.candidates:
        out.append((f"The library's voice “{printable(v.name, 60)}” ({_clips(len(v.clips))})", v.id))
    out.append(("No voice for now (choose one in the cast bar)", None))
    return out


def ask(parent: QWidget, m: Missing) -> str | None:
    """The person's choice for `m` (a library voice id, IMPORT, or None)."""
    options = choices(m)
    label, ok = QInputDialog.getItem(
        parent, "Which voice?",
        f"This project's voice “{printable(m.name or m.voice_id, 60)}” is not in your library, and more than one "
        "voice could be it. Use:", [text for text, _ in options], 0, False)
    if not ok:
        return None
    return dict(options).get(label)


@dataclass
class Resolved:
    """What stands for the project's missing voices, decided (`resolve_voices`)."""

    voices: dict[str, Voice] = field(default_factory=dict)
    """Missing voice id -> the library voice that stands for it now (what `remap` applies to the project)."""
    notes: list[str] = field(default_factory=list)
    """What was done, in words, for the person."""
    imported: int = 0
    """Voices added to the library (the project's packed copies)."""


def resolve_voices(parent: QWidget, library: VoiceLibrary, missing: Sequence[Missing]) -> Resolved:
    """Decide what stands for each of the project's `missing` voices (importing packed ones, asking where
    needed)."""
    p = plan(list(missing))
    chosen: dict[str, str | None] = {m.voice_id: ask(parent, m) for m in p.ask}
    out = Resolved(notes=list(p.notes))
    for m in p.ask:
        choice = chosen[m.voice_id]
        if choice == IMPORT:
            p.imports[m.voice_id] = m.packed  # type: ignore[assignment]
        elif choice is not None:
            p.use[m.voice_id] = choice
    for old_id, path in p.imports.items():
        try:
            out.voices[old_id] = library.import_voice(path)
            out.imported += 1
        except UserError as exc:
            logger.warning("cannot import the packed voice %s: %s", path, exc)
            out.notes.append(f"the project's copy of a voice could not be added: {exc}")
    found = {v.id: v for m in missing for v in m.candidates}  # the library's voices as they were just read
    for old_id, new_id in p.use.items():
        try:
            out.voices[old_id] = found[new_id] if new_id in found else library.get(new_id)
        except UserError as exc:
            out.notes.append(str(exc))
    return out
