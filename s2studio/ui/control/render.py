"""From Render to a running job: the render is built once (design.md §6). QtCore only.

1. `RenderFlow.render` checks the cast once (every speaker of the lines has a voice that exists) and takes what
   the render needs from the document: the script, the voices, the settings, the earlier takes for context.
2. It plans the render's jobs (`RenderPlan`): to an engine that batches, the jobs it runs side by side, one per
   scene (a heading starts a scene, whose first line hears no earlier line) and take (`plan.plan_pieces`).
   `RenderSession.start` compiles what needs no codes of the first job (`plan.line_specs`) and submits it
   (`engine.render.Render`), the other jobs in the passes after: a book's first line starts at once.
3. On the engine thread, each job reads its voices' codes from the library's cache (a clip without cached codes
   for the loaded codec is encoded by the engine, then cached) and generates.

Every step reports through signals; the GUI never waits.
"""

from __future__ import annotations

import logging
from bisect import bisect_left
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from s2studio.engine import api
from s2studio.engine.plan import Piece, check_lines, line_specs, plan_pieces, scene_starts, speaker_voices
from s2studio.engine.render import Render
from s2studio.errors import UserError
from s2studio.state.chapters import scene_start
from s2studio.state.project import GenerationSettings, Project, Take
from s2studio.state.script import Line, Script
from s2studio.state.staleness import take_settings, voice_key
from s2studio.state.voices import Voice, VoiceLibrary
from s2studio.ui.control.document import Document
from s2studio.ui.control.session import Asked, RenderJob, RenderSession
from s2studio.worker import EngineHost

logger = logging.getLogger(__name__)


def no_voice_message(speakers: Sequence[str]) -> str:
    if len(speakers) == 1:
        return f"No voice for {speakers[0]}: pick one in the cast above the script."
    return f"{len(speakers)} speakers have no voice: {', '.join(speakers)}. Pick one for each in the cast."


def lora_on_server_message(voice: Voice, speakers: Sequence[str]) -> str:
    """Why a render on a server refuses a fine-tuned voice, naming it and whose lines it speaks."""
    whose = " and ".join(speakers)
    return (f"The voice “{voice.name}” ({whose}) is fine-tuned with a LoRA, which a server cannot apply: render "
            f"{whose}'s lines on this computer (Settings ▸ Render on), or cast a voice without fine-tuning.")


def left_out_message(speakers: Sequence[str], lines: int) -> str:
    """What a render of the voiced lines says once of the lines it left out."""
    who = speakers[0] if len(speakers) == 1 else f"{', '.join(speakers[:-1])} and {speakers[-1]}"
    return (f"Rendering the lines that have a voice; {lines} line{'s' * (lines != 1)} of {who} left out: "
            f"{'it has' if len(speakers) == 1 else 'they have'} no voice yet (pick one in the cast).")


@dataclass(frozen=True)
class RenderInputs:
    """Everything the request is built from, taken on the GUI thread (the background step reads only this)."""

    job_id: str
    lines: tuple[Line, ...]
    script: Script
    cast: Mapping[str, Voice]
    """Every script speaker that has a voice (voices are numbered over the whole script)."""
    settings: GenerationSettings
    context: tuple[tuple[Line, Take], ...]
    """Every earlier line of the first line's scene with a take, oldest first, when the render does not start at
    the scene's first line: the engine picks the ones a line hears from all of them, so that a line rendered alone
    hears what it heard in a full render."""
    left_out: tuple[Line, ...] = ()
    """Lines asked for whose speaker has no voice: the others render without them."""


def gather(job_id: str, lines: Sequence[Line], script: Script, project: Project,
           voices: Mapping[str, Voice]) -> RenderInputs:
    """The inputs of a render of `lines` (in script order), the cast checked once: lines whose speaker has no
    voice are left out (`left_out`), a `UserError` when none is left. `voices`: voice id -> voice."""
    lines = sorted(lines, key=attrgetter("index"))
    unvoiced = {s for s in set(map(attrgetter("speaker"), lines)) if project.cast.get(s, "") not in voices}
    left_out = tuple(ln for ln in lines if ln.speaker in unvoiced) if unvoiced else ()
    if left_out:
        lines = [ln for ln in lines if ln.speaker not in unvoiced]
        if not lines:
            raise UserError(no_voice_message(list(dict.fromkeys(ln.speaker for ln in left_out))))
    if not any(ln.has_words for ln in lines):
        raise UserError("the lines to render have only tags and no words to speak; add text after the tags")
    cast = {s: voices[vid] for s in script.speakers if (vid := project.cast.get(s, "")) in voices}
    first = lines[0].index
    scene_row = scene_start(script, lines[0])
    context: list[tuple[Line, Take]] = []
    if first > 0:
        for ln in script.lines[bisect_left(script.line_rows, scene_row):first]:
            take = project.current(ln.line_id)
            if take is not None and ln.speaker in cast:
                context.append((ln, take))
    return RenderInputs(job_id, tuple(lines), script, cast, project.settings, tuple(context), left_out)


@dataclass(frozen=True)
class RenderPlan:
    """A render's jobs (`plan.plan_pieces`: its scenes and takes), each compiled only when it is handed to the
    engine, from the lines as they were when the render was asked for: pressing Render All on a book compiles its
    first scene, the others are compiled in the passes that hand them over."""

    render: Render
    """The render without lines: its settings, context turns (numbered as the whole script numbers its voices),
    scene starts and voices."""
    lines: tuple[Line, ...]
    cast: Mapping[str, Voice]
    lora_paths: Mapping[str, Path]
    pieces: tuple[Piece, ...]

    def compile(self, piece: Piece) -> Render:
        return self.render.piece(piece, line_specs(self.lines[piece.start:piece.end], self.cast, self.render.voices,
                                                   self.lora_paths))


def plan_render(inputs: RenderInputs, library: VoiceLibrary, fingerprint: str, takes: int = 1,
                batches: bool = True) -> RenderPlan:
    """The render of `inputs` as `render_for_script` compiles it and `Render.pieces` splits it (`takes` of each
    line; scenes side by side when the engine `batches`), with only what every piece shares made now. Each voice
    speaks with its LoRA."""
    check_lines(inputs.lines, inputs.cast)
    voices = speaker_voices(inputs.script, inputs.cast)
    index = {voice.id: i for i, voice in enumerate(voices)}
    starts = scene_starts(inputs.script)
    turns = tuple(api.ContextTurn(index[inputs.cast[ln.speaker].id], take.text, take.codes)
                  for ln, take in inputs.context)
    request = api.SynthesisRequest(inputs.job_id, (), (), inputs.settings.sampling, context=turns,
                                   scene_starts=starts)
    pieces = plan_pieces(inputs.job_id, list(map(attrgetter("line_id"), inputs.lines)), starts,
                         request.sampling.batching, takes, batches)
    return RenderPlan(Render(request, voices, library, fingerprint), inputs.lines, inputs.cast,
                      library.lora_paths(inputs.cast.values()), tuple(pieces))


class AskedLines(Mapping[str, Asked]):
    """What each line's take is asked for (its take's fingerprint), made when its take comes: a book's Render All
    does not make 10,000 of them at once. Each speaker's voice is keyed once."""

    def __init__(self, inputs: RenderInputs) -> None:
        self._lines = dict(zip(map(attrgetter("line_id"), inputs.lines), inputs.lines))
        self._keys = {speaker: voice_key(voice) for speaker, voice in inputs.cast.items()}
        self._settings = take_settings(inputs.settings)

    def __getitem__(self, line_id: str) -> Asked:
        line = self._lines[line_id]
        return Asked(line.speaker, line.text, self._keys[line.speaker], self._settings)

    def __iter__(self) -> Iterator[str]:
        return iter(self._lines)

    def __len__(self) -> int:
        return len(self._lines)


class RenderFlow(QObject):
    notice = Signal(str)
    """Said once when a render starts without some of the lines asked for (their speakers have no voice)."""

    def __init__(self, host: EngineHost, library: VoiceLibrary, document: Document, session: RenderSession,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.host, self.library, self.document, self.session = host, library, document, session
        self.codec_fingerprint = ""
        self.max_batch = 1
        """Lines the loaded engine renders at once (`ModelInfo.max_batch`): above 1 a render goes as its scenes."""
        self.on_server = False
        """The model is a server's (Settings ▸ Render on): it cannot apply a voice's LoRA."""

    @property
    def busy(self) -> bool:
        return self.session.busy

    def set_codec(self, fingerprint: str) -> None:
        """The loaded codec: cached codes of another codec are encoded again."""
        self.codec_fingerprint = fingerprint

    def render(self, lines: Sequence[Line], takes: int = 1) -> None:
        """Start rendering `lines` (`takes` of each, side by side); UserError (at once) for a cast or a script to fix
        first."""
        if self.busy or not lines:
            return
        d = self.document
        voices = {v.id: v for s in d.script.speakers if (v := d.voice_of(s)) is not None}
        inputs = gather(self.host.new_job_id("render"), lines, d.script, d.project, voices)
        voices_used = {v.id: v for v in inputs.cast.values()}.values()
        if self.on_server:
            for voice in voices_used:
                speakers = [s for s, v in inputs.cast.items() if v.id == voice.id]
                if voice.lora is not None and any(ln.speaker in speakers for ln in inputs.lines):
                    raise UserError(lora_on_server_message(voice, speakers))
        if inputs.left_out:
            speakers = list(dict.fromkeys(ln.speaker for ln in inputs.left_out))
            self.notice.emit(left_out_message(speakers, len(inputs.left_out)))
        plan = plan_render(inputs, self.library, self.codec_fingerprint, takes, self.max_batch > 1)
        self.session.start(RenderJob(inputs.job_id, inputs.lines, takes, AskedLines(inputs), plan.pieces,
                                     plan.compile))

    def cancel(self) -> None:
        self.session.cancel()
