"""The memory planner: will this model fit here, and if not, what would?

Loading S2 Pro and running out of memory half-way costs minutes and can take the desktop down with it, so the
engine predicts the footprint from `config.json` alone (no weights read) and compares it with the memory that
is free right now, before it loads anything. The prediction counts:

- weights: every parameter at the run dtype, except that int8 stores the transformers' linear layers as one
  byte per weight plus one scale per output row, int4 as half a byte plus a bfloat16 scale and offset per group
  of 128 inputs (the embedding tables stay float), and the CPU fast path keeps them in bfloat16;
- the KV cache: keys and values of every slow layer for every position the cache holds (the exact path holds
  the model's whole context; the fast path its own, shorter one), plus the fast model's 10 positions;
- the codec, which always runs in float32 (its size is read from its file when there is one);
- working buffers: activations of a prefill, the RoPE table, the sampler's vocabulary-sized vectors, and the
  allocator's slack — a fixed allowance plus a share of the weights.

Many streams at once (`batch.BatchDecoder`) each need their own KV caches, of their real length (prompt plus
frames): `stream_bytes` is one stream's, `footprint(streams=B)` the load with B of them, `max_streams` how many fit
in the memory left once the model and codec are loaded (the batch decoder admits a request only while its cache
fits: a request that does not fit waits instead of running out of memory).

It runs before any weight is read; the int4 group size comes from the layer type that uses it (`weights/int4.py`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

from s2studio.engine.api import QUANTIZE_MODES
from s2studio.engine.weights.int4 import GROUP as INT4_GROUP
from s2studio.errors import UserError
from s2studio.model.config import DualARConfig, TransformerConfig, find_multiple

GB = 1e9
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
CODEC_BYTES_DEFAULT = int(0.75 * GB)
"""S2's codec in float32 when its file is not there to measure (about 187 M parameters)."""
BUFFER_BYTES = int(0.5 * GB)
BUFFER_SHARE = 0.05
"""Working memory: a fixed allowance plus this share of the weights (allocator slack, prefill activations)."""
STREAM_HEADROOM = BUFFER_BYTES
"""Memory left free beside the streams' caches (allocator slack, a prefill's activations, the codec's streams)."""
TYPICAL_STREAM = 2048
"""Positions of a typical stream (a line: references, a few earlier lines, its frames), which sizes the number of
slots the free memory allows; each request is then admitted by its own length."""
DEFAULT_MAX_BATCH = 8
"""Slots where the free memory cannot be read."""
DEVICE_MAX_BATCH = {"cpu": 8, "mps": 8}
"""The most streams planned on a device whatever its memory holds (`planned_batch`): on a CPU, past about 8 streams
a step's multiplies outgrow its reads of the weights (`bench/batch_speed.py`), so more only make each stream slower
and its first audio later. Elsewhere `GPU_MAX_BATCH`."""
GPU_MAX_BATCH = 64


def layer_linear_params(c: TransformerConfig) -> int:
    """Weights in one block's linear layers (wqkv, wo, w1, w2, w3), biases excluded."""
    return c.dim * (c.q_size + 2 * c.kv_size) + c.q_size * c.dim + 3 * c.dim * c.intermediate_size


def layer_other_params(c: TransformerConfig) -> int:
    """Norm weights and biases of one block: the parts int8 leaves in float."""
    n = 2 * c.dim + (c.q_size + 2 * c.kv_size if c.qkv_bias else 0) + (c.dim if c.o_bias else 0)
    return n + (2 * c.head_dim if c.qk_norm else 0)


@dataclass(frozen=True)
class ParamCounts:
    linear: int
    """Weights int8 replaces: the blocks' linear layers and the fast head (and an untied slow head)."""
    linear_rows: int
    """Output rows of those layers: one scale each."""
    other: int
    """Everything that stays float: embedding tables, norms, biases, the fast input projection."""

    @property
    def total(self) -> int:
        return self.linear + self.other


def param_counts(config: DualARConfig) -> ParamCounts:
    s, f = config.slow, config.fast
    linear = s.n_layer * layer_linear_params(s) + f.n_layer * layer_linear_params(f)
    # output rows of wqkv, wo, w1, w3 and w2 (wo and w2 both give `dim` rows)
    rows = (s.n_layer * (s.q_size + 2 * s.kv_size + 2 * s.dim + 2 * s.intermediate_size)
            + f.n_layer * (f.q_size + 2 * f.kv_size + 2 * f.dim + 2 * f.intermediate_size))
    linear += config.codebook_size * f.dim  # fast_output
    rows += config.codebook_size
    other = config.vocab_size * s.dim + config.codebook_size * config.num_codebooks * s.dim  # embeddings
    other += config.codebook_size * f.dim  # fast_embeddings
    other += s.n_layer * layer_other_params(s) + f.n_layer * layer_other_params(f) + s.dim + f.dim
    if not config.tie_word_embeddings:
        linear += config.vocab_size * s.dim
        rows += config.vocab_size
    if config.fast_has_projection:
        other += s.dim * f.dim + f.dim
    return ParamCounts(linear, rows, other)


@dataclass(frozen=True)
class Footprint:
    weights: int
    kv_cache: int
    codec: int
    buffers: int
    precision: str
    quantize: str
    context: int

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.codec + self.buffers

    def describe(self) -> str:
        what = self.precision if self.quantize == "none" else f"{self.quantize} weights, {self.precision} compute"
        return (f"{self.total / GB:.1f} GB ({what}: weights {self.weights / GB:.1f} GB, KV cache "
                f"{self.kv_cache / GB:.1f} GB for {self.context} positions, codec {self.codec / GB:.1f} GB, "
                f"buffers {self.buffers / GB:.1f} GB)")


def kv_cache_bytes(config: DualARConfig, positions: int, dtype_bytes: int) -> int:
    s, f = config.slow, config.fast
    slow = s.n_layer * 2 * s.n_local_heads * s.head_dim * find_multiple(positions, 8)
    fast = f.n_layer * 2 * f.n_local_heads * f.head_dim * config.num_codebooks
    return (slow + fast) * dtype_bytes


def stream_bytes(config: DualARConfig, positions: int, dtype_bytes: int) -> int:
    """One stream's memory: its KV caches for `positions` (and the fast model's), the record of its token columns
    (int64), and its sampler's vectors (two vocabulary-sized draws and a codebook-sized one, the head's logits)."""
    tokens = (config.num_codebooks + 1) * find_multiple(positions, 8) * 8
    sampler = (3 * config.vocab_size + config.codebook_size) * dtype_bytes
    return kv_cache_bytes(config, positions, dtype_bytes) + tokens + sampler


def max_streams(config: DualARConfig, *, free: int, positions: int, dtype_bytes: int) -> int:
    """How many streams of `positions` fit in `free` bytes (memory left for streams, after the model and codec)."""
    return max(0, free // stream_bytes(config, positions, dtype_bytes))


def planned_batch(config: DualARConfig, *, room: int | None, length: int, dtype_bytes: int, device: str) -> int:
    """The largest batch: streams of a typical length (`TYPICAL_STREAM`, at most `length`) that `room` bytes hold
    (`DEFAULT_MAX_BATCH` when the free memory cannot be read), at most the device's (`DEVICE_MAX_BATCH`), at least 1.
    Each request is then admitted by its own length, so fewer long ones may run at once."""
    cap = DEVICE_MAX_BATCH.get(device, GPU_MAX_BATCH)
    if room is None:
        return min(cap, DEFAULT_MAX_BATCH)
    positions = min(length, TYPICAL_STREAM)
    return max(1, min(cap, max_streams(config, free=room, positions=positions, dtype_bytes=dtype_bytes)))


def footprint(config: DualARConfig, *, precision: str, quantize: str = "none", context: int | None = None,
              codec_bytes: int = CODEC_BYTES_DEFAULT, bf16_linears: bool = False, streams: int = 1) -> Footprint:
    """Predicted bytes to load and run `config` at `precision` ("fp32" | "bf16" | "fp16") with `quantize`
    ("none" | "int8" | "int4") and a KV cache of `context` positions (None: the model's whole context, as the exact
    path allocates). `bf16_linears`: the linear weights stay in bfloat16 whatever the precision (the CPU fast
    path, `weights/bf16.py`; S2's checkpoint is bfloat16, so the load never widens them either). `streams`: that
    many streams of `context` positions each (`stream_bytes`) instead of one KV cache."""
    if precision not in DTYPE_BYTES:
        raise UserError(f"unknown precision {precision!r}; choose one of {', '.join(DTYPE_BYTES)}")
    if quantize not in QUANTIZE_MODES:
        raise UserError(f"unknown quantization {quantize!r}; choose {', '.join(QUANTIZE_MODES)}")
    size = DTYPE_BYTES[precision]
    counts = param_counts(config)
    if quantize == "int8":
        weights = counts.linear + counts.linear_rows * size + counts.other * size
    elif quantize == "int4":
        weights = counts.linear // 2 + 4 * (counts.linear // INT4_GROUP) + counts.other * size  # bf16 ranges
    else:
        weights = counts.linear * (min(2, size) if bf16_linears else size) + counts.other * size
    if quantize != "none":
        weights += (config.codebook_size + 1) * config.slow.dim  # the fast path's int8 copy of the allowed head rows
    positions = min(context or config.slow.max_seq_len, config.slow.max_seq_len)
    buffers = BUFFER_BYTES + int(BUFFER_SHARE * weights) + config.slow.max_seq_len * config.slow.head_dim * size
    kv = kv_cache_bytes(config, positions, size) if streams == 1 else streams * stream_bytes(config, positions, size)
    return Footprint(weights, kv, codec_bytes, buffers, precision, quantize, positions)


def max_batch(config: DualARConfig, *, free: int, precision: str, quantize: str = "none",
              positions: int = TYPICAL_STREAM, codec_bytes: int = CODEC_BYTES_DEFAULT, bf16_linears: bool = False
              ) -> int:
    """The most streams of `positions` that `free` bytes hold beside the model, its codec and the buffers (weights +
    B caches + codec + headroom, `footprint(streams=B)`); 0 when not even one does."""
    none = footprint(config, precision=precision, quantize=quantize, context=positions, codec_bytes=codec_bytes,
                     bf16_linears=bf16_linears, streams=0)
    return max(0, (free - none.total) // stream_bytes(config, positions, DTYPE_BYTES[precision]))


def codec_bytes_of(model_dir: Path) -> int:
    """The codec's memory: its file's size (the file's dtype is not known without reading it; the codec runs in
    float32, so a half-precision file underestimates it by half)."""
    path = Path(model_dir) / "codec.pth"
    return path.stat().st_size if path.is_file() else CODEC_BYTES_DEFAULT


def free_memory(device: str) -> int | None:
    """Bytes free for a new model on `device` ("cpu", "cuda", "cuda:N", "mps"); None when it cannot be told."""
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            return None
        free, _total = torch.cuda.mem_get_info(torch.device(device))
        return int(free)
    if device == "cpu" or device == "mps":  # Apple's GPU shares the system memory
        return available_ram()
    return None


def available_ram(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """MemAvailable from /proc/meminfo (Linux), else free pages from sysconf; None if neither exists."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_fits(config: DualARConfig, device: str, *, precision: str, quantize: str = "none",
               context: int | None = None, codec_bytes: int = CODEC_BYTES_DEFAULT,
               free: int | None = None, bf16_linears: bool = False) -> Footprint:
    """The footprint, or a UserError naming what does fit when the free memory (read now unless given) is short.

    Suggestions, in order of preference: int8 weights at the same precision, bf16, bf16 with int8, bf16 with int4;
    each
    with the largest of the requested, 8192- and 4096-position contexts that fits (a shorter context needs the
    fast path, whose cache is sized to it).
    """
    need = footprint(config, precision=precision, quantize=quantize, context=context, codec_bytes=codec_bytes,
                     bf16_linears=bf16_linears)
    free = free_memory(device) if free is None else free
    if free is None or need.total <= free:
        return need
    hint = "nothing fits: close other programs or use a machine with more memory"
    candidates = [(precision, quantize), (precision, "int8"), ("bf16", "none"), ("bf16", "int8"), ("bf16", "int4")]
    contexts = sorted({need.context, min(8192, need.context), min(4096, need.context)}, reverse=True)
    for p, q in dict.fromkeys(candidates):
        fits = [c for c in contexts if (p, q, c) != (precision, quantize, need.context)
                and footprint(config, precision=p, quantize=q, context=c, codec_bytes=codec_bytes,
                              bf16_linears=bf16_linears).total <= free]
        if fits:
            alt = footprint(config, precision=p, quantize=q, context=fits[0], codec_bytes=codec_bytes,
                            bf16_linears=bf16_linears)
            setting = f"precision {p}" + (f" with {q} weights" if q != "none" else "")
            if fits[0] < need.context:
                setting += f" and the fast path's {fits[0]}-position context"
            hint = f"{setting} needs {alt.total / GB:.1f} GB and fits"
            break
    raise UserError(f"the model needs {need.describe()} but only {free / GB:.1f} GB is free on {device}; {hint}")
