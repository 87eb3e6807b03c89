"""Where the model runs and in which precision.

One place for the policy so that the CLI, the studio and the tests agree: "auto" means CUDA when there is one
(then bfloat16, what upstream ships and runs), else the CPU in float32 (the only mode in which our codes are
checked bit for bit against upstream's).
"""

from __future__ import annotations

import torch

from s2studio.engine.api import DEVICES, DeviceOption
from s2studio.errors import UserError

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
"""The concrete precisions by name (fp16 for callers that ask for it by name; the studio offers fp32 and bf16)."""


def resolve_device(name: str) -> torch.device:
    """"auto" | "cpu" | "cuda" | "cuda:N" | "mps" -> a usable torch.device, or a UserError saying why not."""
    name = (name or "auto").strip().lower()
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if _mps_available():
            return torch.device("mps")
        return torch.device("cpu")
    if name == "cpu":
        return torch.device("cpu")
    if name == "cuda" or name.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise UserError(f"device {name!r} requested but no CUDA GPU is available; use --device cpu")
        device = torch.device(name)
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise UserError(f"device {name!r} does not exist: this machine has {torch.cuda.device_count()} CUDA GPU(s)")
        return device
    if name == "mps":
        if not _mps_available():
            raise UserError("device 'mps' requested but Apple's Metal backend is not available; use --device cpu")
        return torch.device("mps")
    raise UserError(f"unknown device {name!r}; choose one of {', '.join(DEVICES)}")


def resolve_precision(precision: str, device: torch.device) -> str:
    """"auto" -> "bf16" on CUDA, "fp32" elsewhere; "fp32" | "bf16" | "fp16" as named."""
    precision = (precision or "auto").strip().lower()
    if precision == "auto":
        return "bf16" if device.type == "cuda" else "fp32"
    if precision not in DTYPES:
        raise UserError(f"unknown precision {precision!r}; choose one of auto, {', '.join(DTYPES)}")
    return precision


def resolve_dtype(precision: str, device: torch.device) -> torch.dtype:
    """The torch dtype of `resolve_precision`."""
    return DTYPES[resolve_precision(precision, device)]


def set_threads(n: int | None) -> None:
    """Use `n` CPU threads for torch's kernels (None: leave torch's default).

    Note that the thread count is part of the reference bits on CPU: reduction orders depend on it.
    """
    if n is None:
        return
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise UserError(f"--threads must be a positive integer, got {n!r}")
    torch.set_num_threads(n)


def _mps_available() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def device_options() -> tuple[DeviceOption, ...]:
    """Which devices this computer has for the model, and for those it lacks, why (the studio's settings grey
    them out with the reason instead of failing a load)."""
    cuda = torch.cuda.is_available()
    if cuda:
        names = ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
        cuda_option = DeviceOption("cuda", True, names)
    elif torch.version.cuda is None:
        cuda_option = DeviceOption("cuda", False, "this build of PyTorch has no CUDA support")
    else:
        cuda_option = DeviceOption("cuda", False, "no NVIDIA GPU found")
    mps = _mps_available()
    return (DeviceOption("auto", True, "the GPU" if cuda or mps else "the CPU (no GPU found)"),
            DeviceOption("cpu", True, ""), cuda_option,
            DeviceOption("mps", mps, "" if mps else "only on Macs with Apple silicon"))
