"""Project folders on disk: reading one (`read_project` / `load_project`) and the one-shot `save_project`
(design.md §7). The studio keeps a `ProjectFolder` (`state/project_folder.py`) per folder, which saves only
what changed.

A `.s2proj` folder (format 2) is what a person can copy, back up or send:

    project.json                the document as of its last compaction: script, line ids, cast, settings,
                                every line's takes (their rows: text, seed, what they were asked)
    journal.jsonl               what each save since changed, one line per save (`state/project_journal.py`)
    takes/<ab>/<id>.flac        each take's audio (FLAC, 24-bit), written once when the take arrives
    takes/<ab>/<id>.npy         its codes
    takes/<ab>/<id>.peaks.npy   its peaks (the waveform draws from them without decoding)
    voices/<voice id>.s2voice   only in a project saved with its voices

`<ab>` is the first two characters of the take's id (`state/take_files.py`). Projects of format 1
(project.json alone, takes flat in `takes/`, no peaks) open as they are and become format 2 at their first
save. A project may come from someone else, so opening one trusts nothing in it: the document is validated
whole (`state/project_document.py`), take ids never name a path, nothing is read through a link, and a take
whose files cannot be used is reported (`ProjectFile.problems`), never silently dropped.

Crashes: a new folder appears whole (built as `<name>.s2proj.tmp`, renamed into place); an existing one
changes by an fsynced journal append or by renaming a new project.json into place, so at every instant the
folder holds the last finished save. `recover` (run by every open) finishes or undoes a folder rename a
crash interrupted. An autosave carries the path of the project it belongs to (`autosave_of`) inside its
own document, so a SIGKILL can never separate the two.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from s2studio.errors import UserError, printable
from s2studio.state.project import Project
from s2studio.state.project_document import (DOCUMENT, TAKE, ProjectFile, document, exists, project_path,
                                             recover)
from s2studio.state.project_folder import Progress, ProjectFolder
from s2studio.state.project_journal import capture
from s2studio.state.take_files import TAKE_ID

__all__ = ["DOCUMENT", "TAKE", "TAKE_ID", "ProjectFile", "document", "exists", "load_project", "project_path",
           "read_project", "recover", "save_project"]


def read_project(path: Path, progress: Progress | None = None, autosave: bool = False) -> ProjectFile:
    """Open the `.s2proj` folder `path`: the validated project, the takes that could not be read, and
    (for an autosave) the project it belongs to. Raises one `UserError` for a document that is not valid.
    `autosave`: the folder is the studio's autosave (its takes may be in the project it belongs to)."""
    return ProjectFolder.open(Path(path), autosave, progress)[1]


def load_project(path: Path) -> Project:
    """`read_project`, strict: a take that cannot be read is an error too (nothing is left out)."""
    opened = read_project(path)
    if opened.problems:
        more = f" (and {len(opened.problems) - 1} more)" if len(opened.problems) > 1 else ""
        raise UserError(f"{printable(path)}: {opened.problems[0]}{more}")
    return opened.project


def save_project(project: Project, path: Path, autosave_of: Path | None = None,
                 voices: Mapping[str, bytes] | None = None) -> Path:
    """Write `project` to the folder `path` (suffix `.s2proj` added when missing), whole: a project there is
    replaced (its takes that `project` lacks go). `autosave_of`: for an autosave, the project file it
    belongs to. `voices`: voice id -> its `.s2voice` bytes, packed into `voices/`."""
    folder = ProjectFolder(project_path(path), fallback=autosave_of)
    folder.save(capture(project, autosave_of), voices=dict(voices or {}))
    return folder.path
