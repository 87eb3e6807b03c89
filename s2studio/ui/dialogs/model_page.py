"""First run / File ▸ Model: choose an S2 model folder (validated), download S2 Pro after the licence
is accepted, or make the demo model (random weights: it produces noise, for trying the studio).

Validation only checks files, so the GUI thread stays torch-free; the engine reports anything deeper
when it loads. Downloading runs on a plain thread (`control.background`); the demo model is written by
`s2studio demo-model` in a process of its own, because it imports torch.
"""

from __future__ import annotations

import errno
import html
import importlib.util
import logging
import subprocess
import tempfile
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (QCheckBox, QDialog, QDialogButtonBox, QFileDialog, QGroupBox, QHBoxLayout, QLabel,
                               QLineEdit, QProgressBar, QPushButton, QVBoxLayout, QWidget)

from s2studio.errors import UserError, printable
from s2studio.ui.control.background import Background, Cancelled
from s2studio.ui.control.child import studio_command

logger = logging.getLogger(__name__)

REPO_ID = "fishaudio/s2-pro"
LICENSE_URL = "https://huggingface.co/fishaudio/s2-pro/blob/main/LICENSE.md"
WEIGHT_FILES = ("model.safetensors.index.json", "model.safetensors", "model.pth")


def validate_model_dir(path: Path) -> str:
    """A short description of the model in `path`; UserError with the reason when it is not one."""
    path = Path(path)
    if not path.is_dir():
        raise UserError(f"{path} is not a folder; choose the folder that holds config.json.")
    missing = [name for name in ("config.json", "tokenizer.json") if not (path / name).is_file()]
    if not any((path / w).is_file() for w in WEIGHT_FILES) and not any(path.glob("model-*.safetensors")):
        missing.append("model weights (model.safetensors or model.pth)")
    if not (path / "codec.pth").is_file():
        missing.append("codec.pth")
    if missing:
        raise UserError(f"Not an S2 model folder: {', '.join(missing)} missing in {path}.")
    return "demo model (random weights: produces noise)" if is_demo(path) else "S2 model"


def is_demo(path: Path) -> bool:
    readme = Path(path) / "README.md"
    try:
        return readme.is_file() and "random weights" in readme.read_text("utf-8", errors="replace")[:400]
    except OSError:
        return False


OFFLINE = ("LocalEntryNotFoundError", "ConnectError", "ConnectTimeout", "NameResolutionError", "Name or service not known",
           "Temporary failure in name resolution", "Network is unreachable", "offline")


def download_error(exc: BaseException) -> str:
    """One line a person can act on for a failed download (the exception itself goes to the log)."""
    text = f"{type(exc).__name__}: {exc}"
    name = type(exc).__name__
    if any(mark in text for mark in OFFLINE):
        return ("Cannot reach huggingface.co: check the internet connection and try again, or download S2 Pro "
                "on another computer and choose its folder above.")
    if name == "GatedRepoError" or " 401 " in text or " 403 " in text:
        return ("huggingface.co refused the download: open the model's page, accept its licence while logged in, "
                "then log in on this computer (`hf auth login`) and try again.")
    if getattr(exc, "errno", None) in (errno.ENOSPC, errno.EDQUOT):
        return "No space left on the disk for the model (about 11 GB): free some space and try again."
    return f"The download failed ({printable(text, 160)}); details are in the log (Help ▸ Open Log Folder)."


def _download(task: Background, dest: Path) -> Path:
    from huggingface_hub import snapshot_download  # noqa: PLC0415 - optional dependency
    from tqdm.auto import tqdm  # noqa: PLC0415 - comes with huggingface_hub

    class Progress(tqdm):  # type: ignore[misc,valid-type]
        """huggingface_hub reports bytes through tqdm; checking cancel here stops mid-file."""

        def update(self, n=1):  # noqa: ANN001, ANN202
            if task.cancel.is_set():
                raise Cancelled()
            out = super().update(n)
            if self.total:
                task.progress.emit(min(self.n / self.total, 1.0), self.desc or "")
            return out

    try:
        return Path(snapshot_download(REPO_ID, local_dir=dest, tqdm_class=Progress))
    except Cancelled:
        raise
    except Exception as exc:  # noqa: BLE001 - every failure becomes one line; the traceback goes to the log
        logger.warning("downloading %s failed", REPO_ID, exc_info=True)
        raise UserError(download_error(exc)) from None


def _write_demo(task: Background, dest: Path) -> Path:
    """`s2studio demo-model DEST` in its own process: it imports torch, which the studio's GUI process never
    does (design.md §1); a cancel ends the process."""
    task.progress.emit(0.1, "writing the demo model…")
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(studio_command("demo-model", str(dest)), stdout=subprocess.DEVNULL, stderr=err)
        while proc.poll() is None:
            if task.cancel.wait(0.1):
                proc.terminate()
                proc.wait()
                raise Cancelled()
        if proc.returncode != 0:
            err.seek(0)
            lines = err.read().decode("utf-8", "replace").strip().splitlines()
            logger.error("demo-model failed (%s): %s", proc.returncode, "\n".join(lines))
            raise UserError(f"Cannot write the demo model: {lines[-1] if lines else proc.returncode}")
    return dest


class ModelPage(QDialog):
    """`chosen` holds the validated folder when the dialog is accepted (at once after the demo model is made).

    Opened from File ▸ Model… it shows the model in use (`current`) and remembers that the licence was
    accepted (`licence_accepted`); on the first run it explains what a model is."""

    def __init__(self, models_dir: Path, parent: QWidget | None = None, current: Path | None = None,
                 current_name: str = "", licence_accepted: bool = False) -> None:
        super().__init__(parent)
        self.setWindowTitle("Choose a model")
        self.setObjectName("modelPage")
        self.setMinimumWidth(560)
        self.models_dir = models_dir
        self.chosen: Path | None = None
        self._making_demo = False
        self.task = Background("model-page", self)
        self.task.progress.connect(self._progress)
        self.task.done.connect(self._done)
        layout = QVBoxLayout(self)
        layout.setSpacing(12)
        if current is not None:
            shown = html.escape(current_name or current.name)
            intro = QLabel(f"<h3>Model in use: {shown}</h3>From <code>{html.escape(str(current))}</code>. Choose "
                           "another folder, download S2 Pro, or use the tiny demo model.")
        else:
            intro = QLabel("<h3>S2 Studio needs a model</h3>S2 Pro runs on this computer. Choose a folder that "
                           "already holds it, download it, or try the studio with a tiny demo model.")
        intro.setWordWrap(True)
        layout.addWidget(intro)

        box = QGroupBox("Use a model folder")
        bl = QVBoxLayout(box)
        row = QHBoxLayout()
        self.folder = QLineEdit()
        self.folder.setPlaceholderText("Folder with config.json, tokenizer.json, weights and codec.pth")
        self.folder.setAccessibleName("Model folder")
        self.folder.textChanged.connect(self._validate)
        browse = QPushButton("Browse…")
        browse.setAccessibleName("Browse for a model folder")
        browse.clicked.connect(self._browse)
        row.addWidget(self.folder, 1)
        row.addWidget(browse)
        bl.addLayout(row)
        self.verdict = QLabel("")
        self.verdict.setWordWrap(True)
        self.verdict.setAccessibleName("Model folder check")
        bl.addWidget(self.verdict)
        layout.addWidget(box)

        dl = QGroupBox("Download S2 Pro (about 11 GB)")
        dll = QVBoxLayout(dl)
        lic = QLabel(f"S2 Pro's weights are published by Fish Audio under the <b>Fish Audio Research License</b>, "
                     f"which limits how they may be used (commercial use needs a separate licence from Fish Audio). "
                     f"Read it before downloading: <a href='{LICENSE_URL}'>the Fish Audio Research License on "
                     f"huggingface.co</a>.")
        lic.setToolTip(LICENSE_URL)
        lic.setWordWrap(True)
        lic.setOpenExternalLinks(True)
        lic.setTextInteractionFlags(Qt.TextInteractionFlag.TextBrowserInteraction)
        dll.addWidget(lic)
        self.accept_license = QCheckBox("I have read and accept the Fish Audio Research License")
        self.accept_license.setAccessibleName("Accept the Fish Audio Research License")
        self.accept_license.setChecked(licence_accepted)
        dll.addWidget(self.accept_license)
        drow = QHBoxLayout()
        self.download_button = QPushButton("Download")
        self.download_button.setAccessibleName("Download S2 Pro")
        drow.addWidget(self.download_button)
        drow.addStretch(1)
        dll.addLayout(drow)
        self.has_hub = importlib.util.find_spec("huggingface_hub") is not None
        if not self.has_hub:
            note = QLabel("Downloading needs the optional package huggingface_hub "
                          "(<code>pip install 's2studio[download]'</code>).")
            note.setWordWrap(True)
            dll.addWidget(note)
        layout.addWidget(dl)

        demo = QGroupBox("Demo model")
        dml = QHBoxLayout(demo)
        demo_label = QLabel("A tiny model with random weights: it <b>produces noise</b>, not speech. "
                            "For trying the studio only.")
        demo_label.setWordWrap(True)
        self.demo_button = QPushButton("Use demo model")
        self.demo_button.setAccessibleName("Use the demo model (produces noise)")
        dml.addWidget(demo_label, 1)
        dml.addWidget(self.demo_button)
        layout.addWidget(demo)

        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setAccessibleName("Progress")
        self.cancel_button = QPushButton("Stop")  # stops what runs: the download or writing the demo model
        prow = QHBoxLayout()
        prow.addWidget(self.progress, 1)
        prow.addWidget(self.cancel_button)
        for w in (self.progress, self.cancel_button):
            w.setVisible(False)
        self.status = QLabel("")
        self.status.setWordWrap(True)
        layout.addLayout(prow)
        layout.addWidget(self.status)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        self.ok_button = self.buttons.button(QDialogButtonBox.StandardButton.Ok)
        self.ok_button.setText("Use this folder")
        self.ok_button.setDefault(True)  # Enter uses the folder, never Cancel or another focused button
        for button in (browse, self.download_button, self.cancel_button, self.demo_button,
                       self.buttons.button(QDialogButtonBox.StandardButton.Cancel)):
            button.setAutoDefault(False)
        self.buttons.accepted.connect(self._use)
        self.buttons.rejected.connect(self.reject)
        layout.addWidget(self.buttons)

        self.accept_license.toggled.connect(self._update)
        self.download_button.clicked.connect(self.download)
        self.cancel_button.clicked.connect(self.task.cancel.set)
        self.demo_button.clicked.connect(self.make_demo)
        if current is not None:
            self.folder.setText(str(current))
        self._validate()

    def _browse(self) -> None:
        name = QFileDialog.getExistingDirectory(self, "Choose the model folder")
        if name:
            self.folder.setText(name)

    def _validate(self) -> bool:
        text = self.folder.text().strip()
        ok = False
        if not text:
            self.verdict.setText("")
        else:
            try:
                kind = validate_model_dir(Path(text))
            except UserError as exc:
                self.verdict.setText(f"✗ {exc}")
            else:
                self.verdict.setText(f"✓ Looks like an {kind}." if kind.startswith("S2") else f"✓ {kind}.")
                ok = True
        self._valid = ok
        self._update()
        return ok

    def _update(self) -> None:
        running = self.task.running
        self.ok_button.setEnabled(self._valid and not running)
        self.download_button.setEnabled(self.has_hub and self.accept_license.isChecked() and not running)
        self.cancel_button.setEnabled(running)
        self.demo_button.setEnabled(not running)
        self._fit_height()

    def _fit_height(self) -> None:
        """Grow to the height the texts need at this width: a progress bar or a long message appearing would
        otherwise squeeze the wrapped texts above it (the licence link cut in half)."""
        layout = self.layout()
        if layout is None:
            return
        layout.activate()
        needed = layout.totalHeightForWidth(self.width()) if layout.hasHeightForWidth() else layout.sizeHint().height()
        if needed > self.height():
            self.resize(self.width(), needed)

    def _use(self) -> None:
        if self._validate():
            self.chosen = Path(self.folder.text().strip())
            self.accept()

    def download(self) -> None:
        if not self.accept_license.isChecked():
            return
        dest = self.models_dir / "s2-pro"
        self.task.start(lambda task: _download(task, dest))
        self._begin(f"Downloading {REPO_ID} to {dest}…", "Cancel the download")

    def make_demo(self) -> None:
        dest = self.models_dir / "demo-tiny"
        self._making_demo = True
        self.task.start(lambda task: _write_demo(task, dest))
        self._begin("Writing the demo model…", "Stop writing the demo model")

    def _begin(self, message: str, cancel_name: str) -> None:
        self.progress.setValue(0)
        self.cancel_button.setAccessibleName(cancel_name)
        for w in (self.progress, self.cancel_button):
            w.setVisible(True)
        self.status.setText(message)
        self._update()

    def _progress(self, fraction: float, message: str) -> None:
        self.progress.setValue(int(fraction * 1000))
        if message:
            self.status.setText(message)
            self._fit_height()

    def _done(self, result: object, error: str) -> None:
        for w in (self.progress, self.cancel_button):
            w.setVisible(False)
        demo, self._making_demo = self._making_demo, False
        if error:
            self.status.setText(f"✗ {error}")
        else:
            self.status.setText("✓ Done.")
            self.folder.setText(str(result))
            if demo and self._validate():  # the demo model is ready: use it, no second click
                self._use()
                return
        self._update()

    def done(self, code: int) -> None:  # noqa: D102 - a running task is cancelled and waited for
        self.task.cancel.set()
        self.task.wait()
        super().done(code)
