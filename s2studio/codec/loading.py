"""Reading `codec.pth` into a `Codec`, strictly, and fingerprinting what was loaded.

Upstream loads with `strict=False`, so a wrong or missing key passes silently; here every key must be accounted
for: the live weights (in either weight-norm storage), or the six stale S1-era buffers (`freqs_cis`,
`causal_mask` of the three transformers) that upstream no longer reads (spec s2-codec.md §6). Weight norm is
folded once with `torch._weight_norm(v, g, 0)` in float32 on the CPU: the same op on the same inputs as
upstream's per-call recomputation, hence the same weight bits (a hand-written `v·g/‖v‖` is not, §6.2).
"""

from __future__ import annotations

import hashlib
import pickle
import weakref
import zipfile
from pathlib import Path

import torch

from s2studio.codec.codec import Codec
from s2studio.codec.config import KNOWN, CodecConfig
from s2studio.codec.layers import WindowLimitedTransformer
from s2studio.errors import UserError

_G_SUFFIXES = (".parametrizations.weight.original0", ".weight_g")
_V_SUFFIXES = (".parametrizations.weight.original1", ".weight_v")
STALE = (".freqs_cis", ".causal_mask")
"""Buffers an S1-era upstream saved under each transformer; never used (the RoPE table is recomputed)."""


def codec_path(path: Path) -> Path:
    """A model folder or a `codec.pth` → the `codec.pth` file, or a UserError."""
    path = Path(path)
    file = path / "codec.pth" if path.is_dir() else path
    if not file.is_file():
        raise UserError(f"no codec found at {file}; point to a model folder that contains codec.pth")
    return file


def read_checkpoint(file: Path) -> dict[str, torch.Tensor]:
    """The file's tensors, unwrapped (`state_dict`) and without the `generator.` prefix, as upstream does."""
    try:
        try:
            obj = torch.load(file, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as exc:  # the legacy (non-zip) format cannot be mapped
            if "mmap" not in str(exc):
                raise
            obj = torch.load(file, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        if not zipfile.is_zipfile(file):
            raise UserError(f"{file} is not a readable PyTorch checkpoint; re-download codec.pth") from exc
        raise UserError(f"{file} holds more than plain weights and was not loaded (weights_only); "
                        "use an unmodified codec.pth") from exc
    except (RuntimeError, EOFError, zipfile.BadZipFile, ValueError, OSError) as exc:
        raise UserError(f"{file} is not a readable PyTorch checkpoint ({type(exc).__name__}); "
                        "re-download codec.pth") from exc
    if isinstance(obj, dict) and isinstance(obj.get("state_dict"), dict):
        obj = obj["state_dict"]
    if not isinstance(obj, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                            for k, v in obj.items()):
        raise UserError(f"{file} is not a codec state dict (expected names → tensors); use S2 Pro's codec.pth")
    if any("generator" in k for k in obj):
        obj = {k.replace("generator.", ""): v for k, v in obj.items() if "generator." in k}
    return obj


def fold_weight_norm(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Replace each (g, v) pair, in either storage, by `weight = torch._weight_norm(v, g, 0)` (float32, CPU)."""
    out: dict[str, torch.Tensor] = {}
    pairs: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in state.items():
        for part, suffixes in (("g", _G_SUFFIXES), ("v", _V_SUFFIXES)):
            suffix = next((s for s in suffixes if key.endswith(s)), None)
            if suffix is not None:
                pairs.setdefault(key[: -len(suffix)], {})[part] = value
                break
        else:
            out[key] = value
    for owner, gv in pairs.items():
        if set(gv) != {"g", "v"}:
            raise UserError(f"codec.pth has half a weight-norm pair at {owner}; the file is damaged")
        g, v = gv["g"].to("cpu", torch.float32), gv["v"].to("cpu", torch.float32)
        out[owner + ".weight"] = torch._weight_norm(v, g, 0)
    return out


def _expected(config: CodecConfig) -> dict[str, tuple[int, ...]]:
    with torch.device("meta"):
        model = Codec(config)
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def _stale_names(config: CodecConfig) -> set[str]:
    with torch.device("meta"):
        model = Codec(config)
    names = [n for n, m in model.named_modules() if isinstance(m, WindowLimitedTransformer)]
    return {n + s for n in names for s in STALE}


def _mismatch(state: dict[str, torch.Tensor], expected: dict[str, tuple[int, ...]]) -> str | None:
    """None when `state` fits `expected` exactly; else a short description of the first differences."""
    missing = sorted(set(expected) - set(state))
    extra = sorted(set(state) - set(expected))
    shapes = sorted(k for k in set(state) & set(expected) if tuple(state[k].shape) != expected[k])
    parts = []
    if missing:
        parts.append(f"{len(missing)} missing (e.g. {missing[0]})")
    if extra:
        parts.append(f"{len(extra)} unexpected (e.g. {extra[0]})")
    if shapes:
        k = shapes[0]
        parts.append(f"{len(shapes)} with other shapes (e.g. {k}: {tuple(state[k].shape)} vs {expected[k]})")
    return "; ".join(parts) or None


def _count(state: dict[str, torch.Tensor], prefix: str) -> int:
    """How many `prefix{i}.` indices exist, counting from 0 (layers, blocks, codebooks)."""
    i = 0
    while any(k.startswith(f"{prefix}{i}.") for k in state):
        i += 1
    return i


def infer_config(state: dict[str, torch.Tensor]) -> CodecConfig | None:
    """The architecture a (folded) state dict implies, for codecs other than S2's and our tiny one. Shapes
    give every width, rate and layer count; they cannot give the quantizer transformers' window or head size,
    which keep S2's (128 frames; 64-wide heads, as upstream hard-codes for the encoder's)."""
    try:
        n_enc = _count(state, "encoder.block.") - 3  # conv, blocks…, Snake, conv
        n_dec = _count(state, "decoder.model.") - 3  # conv, blocks…, Snake, conv (tanh has no weights)
        enc_rates = tuple(state[f"encoder.block.{i}.block.4.conv.weight"].shape[-1] // 2 for i in range(1, n_enc + 1))
        dec_rates = tuple(state[f"decoder.model.{i}.block.1.conv.weight"].shape[-1] // 2 for i in range(1, n_dec + 1))
        down = tuple(state[f"quantizer.downsample.{i}.0.conv.weight"].shape[-1]
                     for i in range(_count(state, "quantizer.downsample.")))
        residual = state["quantizer.quantizer.quantizers.0.codebook.weight"]
        dim = state["quantizer.pre_module.norm.weight"].shape[0]
        return CodecConfig(
            encoder_dim=state["encoder.block.0.conv.weight"].shape[0],
            encoder_rates=enc_rates,
            encoder_transformer_layers=tuple(_count(state, f"encoder.block.{i}.block.5.layers.")
                                             for i in range(1, n_enc + 1)),
            decoder_dim=state["decoder.model.0.conv.weight"].shape[0],
            decoder_rates=dec_rates,
            n_codebooks=_count(state, "quantizer.quantizer.quantizers."),
            codebook_size=residual.shape[0],
            codebook_dim=residual.shape[1],
            semantic_codebook_size=state["quantizer.semantic_quantizer.quantizers.0.codebook.weight"].shape[0],
            downsample_factor=down,
            quantizer_layers=_count(state, "quantizer.pre_module.layers."),
            quantizer_heads=max(1, dim // 64),
            quantizer_head_dim=64,
            quantizer_intermediate=state["quantizer.pre_module.layers.0.feed_forward.w1.weight"].shape[0],
        )
    except (KeyError, IndexError, ValueError, ZeroDivisionError):
        return None


def load_codec(path: Path, device: str | torch.device = "cpu", config: CodecConfig | None = None) -> Codec:
    """Load `codec.pth` (or the one in a model folder) strictly into a float32 `Codec` on `device`, in eval mode.

    The architecture is recognised from the tensors' shapes (S2's codec, the tiny test codec, or else what
    `infer_config` reads from them) unless `config` is given; any key or shape that does not fit raises a
    UserError naming the first offender (measured against S2's codec)."""
    file = codec_path(path)
    raw = read_checkpoint(file)
    folded = fold_weight_norm(raw)  # stale buffers pass through untouched
    candidates = [config] if config is not None else list(KNOWN.values())
    if config is None and (inferred := infer_config(folded)) is not None and inferred not in candidates:
        candidates.append(inferred)
    problems = []
    for cand in candidates:
        stale = _stale_names(cand)
        state = {k: v for k, v in folded.items() if k not in stale}
        problem = _mismatch(state, _expected(cand))
        if problem is None:
            break
        problems.append(problem)
    else:
        raise UserError(f"{file} is not S2 Pro's codec: {problems[0]}")
    with torch.device("meta"):
        model = Codec(cand)
    # own copies in float32: the file is memory-mapped, and must not back the weights after this returns
    state = {k: v.to(torch.float32).clone() for k, v in state.items()}
    model.load_state_dict(state, strict=True, assign=True)
    model = model.to(device).eval()
    model.requires_grad_(False)
    return model


_fingerprints: weakref.WeakKeyDictionary[Codec, str] = weakref.WeakKeyDictionary()


def codec_fingerprint(codec: Codec) -> str:
    """A hex digest of the architecture and every loaded weight: changes whenever the codes it would produce
    could change, so cached reference codes keyed by it are re-encoded then. Computed once per codec (kept beside
    it, not on it)."""
    cached = _fingerprints.get(codec)
    if cached is not None:
        return cached
    h = hashlib.blake2b(digest_size=16)
    h.update(codec.config.describe().encode())
    for name, tensor in sorted(codec.state_dict().items()):
        t = tensor.detach().to("cpu").contiguous()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
        h.update(memoryview(t.view(torch.uint8).numpy()))
    digest = h.hexdigest()
    _fingerprints[codec] = digest
    return digest
