"""`load_runtime`: the one recipe that turns a model folder into something that speaks.

The studio's engine (`S2Engine.load`), `s2studio synth`, the server and training all load through here, so
that they agree on every choice: the device and precision, the thread count, the exact loop or the
fast path (and the fast path's cache length), whether the CPU fast path keeps bf16 weights, the memory check
before anything heavy is read, the narrowing of the linear layers, the codec. The recipe runs as a generator of
`LoadStep`s so that the engine can report progress and honour a cancel between steps; `load_runtime` runs it to
the end for callers that only want the result. Training reads the same parts (`load_tokenizer`, `load_model`,
`load_codec_for`) without the rest: it needs the model as stored, in float32, and no decoder.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from s2studio.audio import SAMPLE_RATE
from s2studio.codec.codec import Codec
from s2studio.codec.fast_stream import PACKED_SHARE, packing_available
from s2studio.codec.loading import codec_fingerprint, load_codec
from s2studio.engine.api import QUANTIZE_MODES, SPEEDS, ModelInfo, Quantize, Speed
from s2studio.engine.plan import lora_digest
from s2studio.engine.s2.batch import BatchDecoder
from s2studio.engine.s2.device import DTYPES, resolve_device, resolve_precision, set_threads
from s2studio.engine.s2.fast import FastDecoder
from s2studio.engine.s2.generate import Decoder, ExactDecoder
from s2studio.engine.s2.memory import check_fits, codec_bytes_of
from s2studio.engine.weights import cpu_gemv
from s2studio.engine.weights.checkpoints import load_dual_ar
from s2studio.engine.weights.lora_apply import LoraSwitch
from s2studio.engine.weights.narrow import Narrow, Narrowed, narrowing_of
from s2studio.errors import UserError
from s2studio.model.config import load_config
from s2studio.model.dual_ar import DualAR
from s2studio.text.tokenizer import S2Tokenizer

FAST_CONTEXT = 8192
"""Positions of the fast path's KV cache: S2 Pro's 32768 would cost 9.7 GB in float32 (1.2 GB at 8192 in bf16)."""
MODEL_FILES = ("config.json", "tokenizer.json")
"""What every S2 model folder holds besides its weights (and `codec.pth`, needed for audio)."""


@dataclass(frozen=True)
class LoadStep:
    progress: float
    """0..1."""
    message: str


@dataclass(frozen=True)
class Runtime:
    """A loaded S2: the model, its tokenizer and codec, the decoder chosen at load, and what was loaded."""

    model: DualAR
    tokenizer: S2Tokenizer
    codec: Codec | None
    """None only when loaded with `codec=False` (`synth --text` writing codes only)."""
    decoder: Decoder[Any] | BatchDecoder
    """`ExactDecoder`, `FastDecoder` (its KV cache keeps the last prompt's prefix between requests), or on the fast
    path loaded for many streams (`streams=True`, the engine's) a `BatchDecoder` (its slots keep theirs)."""
    info: ModelInfo
    narrowed: Narrowed
    """What the loader narrowed the linear layers to (bf16 on the CPU fast path, or the int8/int4 asked for)."""
    lora: LoraSwitch
    """The LoRA merged into the model now (none at first) and the base weights to switch (weights/lora_apply.py)."""
    exact_audio: bool
    """Whether audio streams with the exact decoder's rounding rules (the exact loop: samples equal a full decode's)
    or the faster non-exact decode (every other speed; 1 LSB from it in float32, ~42 dB SNR where the CPU runs it in
    bfloat16, see `codec/fast_stream.py`)."""

    @property
    def device(self) -> torch.device:
        return self.model.embeddings.weight.device

    def holds_lora(self, path: Path | None) -> bool:
        """Whether the model holds the LoRA file `path` (None: the base weights) now: the same file's bytes."""
        return (lora_digest(path) if path is not None else None) == self.lora.digest

    def use_lora(self, path: Path | None) -> bool:
        """Merge the LoRA file `path` into the model (None: back to the base weights); False if already so."""
        if self.holds_lora(path):
            return False  # nothing to read (a voice's lines come one after another)
        changed = self.lora.use(self.lora.read(path) if path is not None else None)
        if changed:
            self.decoder.weights_changed()
        return changed


def check_model_folder(folder: Path) -> Path:
    """`folder` as a Path, or a UserError naming what makes it no S2 model folder (before anything is read)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise UserError(f"model folder {folder} does not exist or is not a folder")
    missing = [name for name in MODEL_FILES if not (folder / name).is_file()]
    if missing:
        raise UserError(f"{folder} is not an S2 model folder: " + ", ".join(f"{n} is missing" for n in missing))
    return folder


def load_tokenizer(folder: Path) -> S2Tokenizer:
    return S2Tokenizer.from_file(Path(folder) / "tokenizer.json")


def load_model(folder: Path, tokenizer: S2Tokenizer, *, device: torch.device | str, dtype: torch.dtype | None,
               narrow: Narrow = "none") -> DualAR:
    """The language model of `folder`, checked against its tokenizer (the semantic tokens' range, the end token);
    `dtype` None: as stored."""
    return load_dual_ar(folder, device=device, dtype=dtype, narrow=narrow,
                        semantic_range=(tokenizer.semantic_begin_id, tokenizer.semantic_end_id),
                        im_end_id=tokenizer.im_end_id)


def load_codec_for(folder: Path, device: torch.device | str = "auto") -> Codec:
    """The codec of `folder` on `device` ("auto": the recipe's choice), always float32 (spec s2-codec.md §7.4)."""
    return load_codec(folder, device=device if isinstance(device, torch.device) else resolve_device(device))


def resolve_speed(speed: Speed, device: torch.device, precision: str) -> Literal["exact", "fast"]:
    """"auto": the fast path everywhere except float32 on the CPU, the one mode whose codes are checked bit for
    bit against upstream's (there the exact loop stays)."""
    if speed not in SPEEDS:
        raise UserError(f"unknown speed {speed!r}; choose one of {', '.join(SPEEDS)}")
    if speed == "auto":
        return "exact" if device.type == "cpu" and precision == "fp32" else "fast"
    return speed


def load_steps(folder: Path, *, device: str = "auto", precision: str = "auto", quantize: Quantize = "none",
               speed: Speed = "auto", context: int | None = None, threads: int | None = None,
               codec: bool = True, lora: Path | None = None, streams: bool = False,
               max_batch: int | None = None) -> Generator[LoadStep, None, Runtime]:
    """The recipe, step by step; its return value (`StopIteration.value`) is the `Runtime`.

    `context`: positions of the fast path's cache (None: `FAST_CONTEXT`, at most the model's context); the exact
    loop always holds the model's whole context, as upstream does, so it takes none. `codec=False` skips the codec
    (and its memory); `lora` merges that LoRA file into the model (`Runtime.use_lora` changes it later). `streams`:
    the fast path runs many streams at once (a `BatchDecoder` of `max_batch` slots, None: the memory planner's,
    `memory.planned_batch`, sized once the model and codec are in memory). Every problem a person can fix is a
    UserError."""
    yield LoadStep(0.0, "reading the tokenizer")
    if quantize not in QUANTIZE_MODES:
        raise UserError(f"unknown quantization {quantize!r}; choose one of {', '.join(QUANTIZE_MODES)}")
    folder = check_model_folder(folder)
    where = resolve_device(device)
    name = resolve_precision(precision, where)
    set_threads(threads)
    path = resolve_speed(speed, where, name)
    if path == "exact" and context is not None:
        raise ValueError("context sizes the fast path's cache; the exact loop holds the model's whole context")
    tokenizer = load_tokenizer(folder)
    config = load_config(folder)
    kernels = None
    if where.type == "cpu" and (path == "fast" or quantize != "none"):
        yield LoadStep(0.05, "loading the CPU kernels")
        kernels = cpu_gemv.kernel_path()
    narrow: Narrow = quantize
    if quantize == "none" and path == "fast" and where.type == "cpu" and cpu_gemv.available():
        narrow = "bf16"  # the CPU fast path reads half the bytes (weights/bf16.py); elsewhere torch's bf16 is fast
    yield LoadStep(0.1, "loading the language model")
    positions = min(context or FAST_CONTEXT, config.slow.max_seq_len) if path == "fast" else None
    # refuse before reading gigabytes that cannot fit, naming a setting that does
    codec_bytes = codec_bytes_of(folder) if codec else 0
    if path != "exact" and packing_available(where):  # the non-exact decode's packed weights (either dtype)
        codec_bytes += round(codec_bytes * PACKED_SHARE)
    check_fits(config, str(where), precision=name, quantize=quantize, context=positions,
               codec_bytes=codec_bytes, bf16_linears=narrow == "bf16")
    model = load_model(folder, tokenizer, device=where, dtype=DTYPES[name], narrow=narrow)
    narrowed = narrowing_of(model)
    switch = LoraSwitch(model, folder)
    if lora is not None:
        yield LoadStep(0.65, "merging the LoRA")
        switch.use(switch.read(lora))
    loaded_codec = None
    if codec:
        yield LoadStep(0.7, "loading the codec")
        loaded_codec = load_codec_for(folder, where)
    yield LoadStep(0.9, "allocating the caches")
    decoder: Decoder[Any] | BatchDecoder
    if path == "fast" and streams:
        decoder = BatchDecoder(model, tokenizer.im_end_id, length=positions, max_batch=max_batch)
    elif path == "fast":
        decoder = FastDecoder(model, tokenizer.im_end_id, length=positions)
    else:
        decoder = ExactDecoder(model, tokenizer.im_end_id)
    dtype = str(DTYPES[name]).removeprefix("torch.")
    described = dtype + ("" if quantize == "none" else f"+{quantize}")
    if narrowed.mode == "bf16" and name != "bf16":
        described += ", bf16 weights"
    info = ModelInfo(name=folder.name, device=str(where), precision=described,
                     sample_rate=loaded_codec.sample_rate if loaded_codec is not None else SAMPLE_RATE,
                     codec_fingerprint=codec_fingerprint(loaded_codec) if loaded_codec is not None else "",
                     max_context=decoder.length, kernels=kernels.describe() if kernels else "",
                     kernels_note="" if kernels is None or kernels.native else kernels.reason,
                     max_batch=decoder.max_batch if isinstance(decoder, BatchDecoder) else 1)
    return Runtime(model, tokenizer, loaded_codec, decoder, info, narrowed, switch, exact_audio=path == "exact")


def load_runtime(folder: Path, *, device: str = "auto", precision: str = "auto", quantize: Quantize = "none",
                 speed: Speed = "auto", context: int | None = None, threads: int | None = None,
                 codec: bool = True, lora: Path | None = None, streams: bool = False,
                 max_batch: int | None = None) -> Runtime:
    """The one load recipe (see `load_steps` for the options), run to its end."""
    steps = load_steps(folder, device=device, precision=precision, quantize=quantize, speed=speed,
                       context=context, threads=threads, codec=codec, lora=lora, streams=streams,
                       max_batch=max_batch)
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value
