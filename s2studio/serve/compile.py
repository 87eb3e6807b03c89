"""From what a client sends to the lines the engine speaks (the same `LineSpec`s the studio compiles).

- Fish's `text` keeps upstream's meaning: `<|speaker:i|>` turns, speaker i conditioned on reference i, rendered
  in upstream batching (turns grouped by `chunk_length`), so a request gives what upstream's server gives.
  Unlike upstream, text before the first tag is spoken (by speaker 0), never dropped.
- OpenAI's `input` is one voice's text of up to 4096 characters: paragraphs, split at sentence ends into
  pieces of at most `PIECE_BYTES`, each its own line in line mode (conditioned on the pieces before it), so
  a long input does not become one overlong generation. `instructions` becomes an inline tag on every piece.
- The script extension (`Name:` lines with a `cast` of library voices) is parsed and compiled exactly as the
  studio and `s2studio synth --script` compile a script (`engine.render.render_for_script`).
"""

from __future__ import annotations

import re

from s2studio.engine.api import LineSpec
from s2studio.serve.errors import ApiError

PIECE_BYTES = 300
"""Longest piece of OpenAI input per line (upstream's command line batches 300 bytes)."""
MAX_INSTRUCTION_CHARS = 200

_SPEAKER = re.compile(r"<\|speaker:(\d{1,4})\|>")
_SENTENCE = re.compile(r"(?<=[.!?。！？…])\s+")


def tts_lines(text: str) -> tuple[LineSpec, ...]:
    """One line per `<|speaker:i|>` turn (text before the first tag: speaker 0), in order."""
    pieces = _SPEAKER.split(text)
    lines: list[LineSpec] = []

    def add(speaker: int, words: str) -> None:
        if words.strip():
            lines.append(LineSpec(f"t{len(lines) + 1}", speaker, words.strip()))

    add(0, pieces[0])
    for i in range(1, len(pieces), 2):
        add(int(pieces[i]), pieces[i + 1])
    if not lines:
        raise ApiError(400, "the text is empty; send something to say in `text`", "empty_text", "text")
    return tuple(lines)


def instruction_tag(instructions: str | None) -> str:
    """`"whispering"` -> `"[whispering] "`: S2's free-form inline tag (brackets inside are dropped)."""
    if not instructions:
        return ""
    words = " ".join(instructions.replace("[", " ").replace("]", " ").split())
    if len(words) > MAX_INSTRUCTION_CHARS:
        raise ApiError(400, f"instructions are {len(words)} characters; S2 takes a short style tag "
                       f"(at most {MAX_INSTRUCTION_CHARS}), e.g. 'whispering'", "instructions_too_long", "instructions")
    return f"[{words}] " if words else ""


def _pieces(paragraph: str) -> list[str]:
    out: list[str] = []
    current = ""
    for sentence in _SENTENCE.split(paragraph):
        candidate = f"{current} {sentence}".strip()
        if current and len(candidate.encode()) > PIECE_BYTES:
            out.append(current)
            current = sentence
        else:
            current = candidate
    if current:
        out.append(current)
    return out


def speech_lines(text: str, instructions: str | None = None, speaker: int = 0) -> tuple[LineSpec, ...]:
    tag = instruction_tag(instructions)
    pieces = [p for paragraph in text.splitlines() if paragraph.strip() for p in _pieces(paragraph.strip())]
    if not pieces:
        raise ApiError(400, "the input is empty; send something to say in `input`", "empty_input", "input")
    return tuple(LineSpec(f"p{i + 1}", speaker, tag + piece) for i, piece in enumerate(pieces))
