"""The window's commands for checked takes: Render ▸ Render Failing Lines Again, Best of N Takes…, Retake Until
It Passes…, Go to Next Failed Line, Show Only Failed Lines, and the question Export asks when picked takes failed
a check. The work is `control.take_checks` (every take checked in the checks' own process) and `control.retakes`
(the loops). The thresholds come from Settings ▸ Checks; a change there, or of the recognizer in Settings ▸
Transcripts, has every take checked with other ones checked again (its old result shown until then)."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, QSettings
from PySide6.QtWidgets import QInputDialog, QMessageBox, QWidget

from s2studio.checks.job import Clip
from s2studio.state.script import Line
from s2studio.state.voices import VoiceLibrary
from s2studio.ui.control.asr_choice import asr_settings
from s2studio.ui.control.document import Document
from s2studio.ui.control.render import RenderFlow
from s2studio.ui.control.retakes import Retakes
from s2studio.ui.control.session import RenderSession
from s2studio.ui.control.take_checks import TakeChecks
from s2studio.ui.inspector.checks_box import thresholds
from s2studio.ui.inspector.inspector import Inspector
from s2studio.ui.script.editor import ScriptEditor
from s2studio.ui.script.line_filter import show_only_rows
from s2studio.ui.window.line_states import LineStates

TAKES_KEY, ATTEMPTS_KEY = "checks/takes", "checks/attempts"
DEFAULT_TAKES, DEFAULT_ATTEMPTS, MOST = 3, 4, 16


class CheckCommands(QObject):
    def __init__(self, window: QWidget, document: Document, library: VoiceLibrary, flow: RenderFlow,
                 session: RenderSession, states: LineStates, settings: QSettings, inspector: Inspector,
                 editor: ScriptEditor, lines: Callable[[], list[Line]], say: Callable[[str], None]) -> None:
        super().__init__(window)
        self.window, self.document, self.library, self.states, self.settings = window, document, library, states, settings
        self.editor, self.lines, self.say = editor, lines, say
        self.checks = TakeChecks(document, self._clips_of, lambda: asr_settings(settings), thresholds(settings),
                                 parent=self)
        self.retakes = Retakes(document, self.checks, flow, session, self)
        self.retakes.message.connect(say)
        inspector.checks_box.changed.connect(self.checks.set_settings)
        inspector.transcripts_box.changed.connect(self.checks.check_project)
        self.only_failed = False
        self._rows_hidden = False
        for signal in (document.script_changed, document.takes_changed, document.replaced, self.checks.checked):
            signal.connect(lambda *_: self._filter())

    def _clips_of(self, speaker: str) -> tuple:
        voice = self.document.voice_of(speaker)
        if voice is None:
            return ()
        return tuple(Clip(str(self.library.clip_path(voice, c)), c.transcript) for c in voice.clips)

    def render_failing(self) -> None:
        lines = self.document.failed_lines()
        if not lines:
            self.say("No line's picked take failed a check.")
            return
        self.retakes.flow.render(lines)

    def show_only_failed(self, on: bool) -> None:
        """The filter: only the lines whose picked take failed a check are shown in the script (every line when
        none did, and it says so)."""
        self.only_failed = on
        self._filter()
        if on and not self.document.failed_lines():
            self.say("No line's picked take failed a check: every line is shown.")

    def _filter(self) -> None:
        failed = self.document.failed_lines() if self.only_failed else []
        if not failed and not self._rows_hidden:
            return  # every row is shown already: no walk over a book's rows for each finished take
        self._rows_hidden = bool(failed)
        show_only_rows(self.editor, {ln.source_line - 1 for ln in failed} if failed else None)

    def best_of_n(self, n: int | None = None) -> None:
        n = n or self._ask("Best of N Takes", "Takes of each line (the best is kept):", TAKES_KEY, DEFAULT_TAKES)
        if n:
            self.retakes.best_of(self.lines(), n)

    def retake_until_pass(self, k: int | None = None) -> None:
        k = k or self._ask("Retake Until It Passes", "At most this many takes of each line:", ATTEMPTS_KEY,
                           DEFAULT_ATTEMPTS)
        if k:
            self.retakes.until_pass(self.lines(), k)

    def _ask(self, title: str, label: str, key: str, default: int) -> int:
        try:
            last = int(self.settings.value(key, default))
        except (TypeError, ValueError):
            last = default
        value, ok = QInputDialog.getInt(self.window, title, label, min(max(last, 1), MOST), 1, MOST)
        if not ok:
            return 0
        self.settings.setValue(key, value)
        return value

    def next_failed(self) -> None:
        """Move to the next line (after the cursor's, wrapping) whose picked take failed a check."""
        failed = self.document.failed_lines()
        if not failed:
            self.say("No line's picked take failed a check.")
            return
        here = self.states.selected()
        order = [ln.line_id for ln in self.document.script.lines]
        at = order.index(here.line_id) if here is not None and here.line_id in order else -1
        later = [ln for ln in failed if order.index(ln.line_id) > at]
        self.states.select((later or failed)[0].line_id)

    def confirm_export(self) -> bool:
        """Before an export: when picked takes failed a check, say how many and let the person go on or go to
        the first of them. True: go on."""
        failed = self.document.failed_lines()
        if not failed:
            return True
        box = QMessageBox(QMessageBox.Icon.Warning, "Export",
                          f"The picked take of {len(failed)} line{'s' * (len(failed) != 1)} failed a check "
                          "(words missed, a cut-off end, a fade…).", parent=self.window)
        box.setObjectName("failedChecksBox")
        box.setInformativeText("Export them as they are, or go to the first and render it again?")
        go_on = box.addButton("Export Anyway", QMessageBox.ButtonRole.AcceptRole)
        box.addButton("Go to First Failed Line", QMessageBox.ButtonRole.RejectRole)
        box.exec()
        if box.clickedButton() is go_on:
            return True
        self.states.select(failed[0].line_id)
        return False
