"""Where the file dialogs open: the folder the person used last for that kind of file, else their documents
folder. Never the program's own folder, which is where a dialog given a bare name ("Untitled.s2proj") or no folder
at all opens (the working directory `scripts/studio` starts in). Remembered in QSettings under `files/<kind>`."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSettings, QStandardPaths

KINDS = ("project", "voice", "clips")
"""Projects (.s2proj), voice files (.s2voice), reference clips (audio)."""
AUDIO_FILTER = "Audio (*.wav *.flac *.ogg *.mp3 *.aiff *.aif);;All files (*)"
"""What the dialogs that choose reference clips show."""


def documents() -> Path:
    """The person's documents folder (their home where there is none)."""
    found = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.DocumentsLocation)
    folder = Path(found) if found else Path.home()
    return folder if folder.is_dir() else Path.home()


def start_in(kind: str, name: str = "") -> str:
    """The path a dialog for `kind` opens at: the last folder used for it (while it exists) or the documents
    folder, with the file `name` suggested in it."""
    assert kind in KINDS, kind
    last = str(QSettings().value(f"files/{kind}", "") or "")
    folder = Path(last) if last and Path(last).is_dir() else documents()
    return str(folder / name) if name else str(folder)


def remember(kind: str, chosen: Path) -> None:
    """The folder of what was chosen (a file's or a project folder's parent) is where `kind` opens next time."""
    assert kind in KINDS, kind
    QSettings().setValue(f"files/{kind}", str(Path(chosen).parent))
