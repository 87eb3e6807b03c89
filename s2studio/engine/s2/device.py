"""Where the model runs and in which precision.

One place for the policy so that the CLI, the studio and the tests agree: "auto" means CUDA when there is one
(then bfloat16, what upstream ships and runs), else the CPU in float32 (the only mode in which our codes are
checked bit for bit against upstream's).

A GPU is used only once it has passed a self-test (`gpu_problem`): the kinds of operation the model, the codec
and the samplers run (float32 and, on CUDA, bfloat16 products, softmax, complex products for RoPE, top-k, sort,
cumsum, uniform draws from the device's generator), each compared with the CPU's result. A driver too old for
this torch, a GPU torch has no kernels for ("no kernel image is available"), or an Apple GPU on a macOS whose
Metal backend lacks complex numbers fails it: "auto" then falls back to the CPU with a log line saying why, and
naming that device fails with the reason.
"""

from __future__ import annotations

import functools
import logging
import shutil

import torch

from s2studio.engine.api import DEVICES, DeviceOption
from s2studio.errors import UserError

log = logging.getLogger(__name__)

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
"""The concrete precisions by name (fp16 for callers that ask for it by name; the studio offers fp32 and bf16)."""


def resolve_device(name: str) -> torch.device:
    """"auto" | "cpu" | "cuda" | "cuda:N" | "mps" -> a usable torch.device, or a UserError saying why not."""
    name = (name or "auto").strip().lower()
    if name == "auto":
        for gpu in (["cuda"] if torch.cuda.is_available() else []) + (["mps"] if _mps_available() else []):
            problem = gpu_problem(gpu)
            if problem is None:
                return torch.device(gpu)
            log.warning("the GPU (%s) failed its self-test, the CPU serves: %s", gpu, problem)
        return torch.device("cpu")
    if name == "cpu":
        return torch.device("cpu")
    if name == "cuda" or name.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise UserError(f"device {name!r} requested but no CUDA GPU is available; use --device cpu")
        device = torch.device(name)
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise UserError(f"device {name!r} does not exist: this machine has {torch.cuda.device_count()} CUDA GPU(s)")
        _check_gpu(str(device))
        return device
    if name == "mps":
        if not _mps_available():
            raise UserError("device 'mps' requested but Apple's Metal backend is not available; use --device cpu")
        _check_gpu("mps")
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


def _check_gpu(name: str) -> None:
    problem = gpu_problem(name)
    if problem is not None:
        raise UserError(f"the GPU ({name}) failed its self-test: {problem}; use --device cpu")


@functools.lru_cache(maxsize=None)
def gpu_problem(name: str) -> str | None:
    """Why the device `name` cannot run the model, or None: the self-test above, once per device and process."""
    device = torch.device(name)
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(48, 96, generator=g), torch.randn(96, 40, generator=g)
    angles = torch.randn(40, 8, generator=g)
    logits = torch.randn(4, 4097, generator=g)
    checks = [("float32 products", torch.float32, 1e-3)]
    if device.type == "cuda":  # bf16: the precision "auto" picks there
        checks.append(("bfloat16 products", torch.bfloat16, 3e-2))
    step = "starting it"
    try:
        for step, dtype, tol in checks:
            got = (a.to(device, dtype) @ b.to(device, dtype)).float().softmax(-1).cpu()
            want = (a.to(dtype).float() @ b.to(dtype).float()).softmax(-1)
            if not torch.allclose(got, want, atol=tol, rtol=tol):
                return f"its {step} differ from the CPU's"
        step = "complex products (RoPE)"
        cis = torch.polar(torch.ones_like(angles), angles)
        pairs = torch.view_as_complex(torch.randn(40, 8, 2, generator=g))
        if not torch.allclose(torch.view_as_real(pairs.to(device) * cis.to(device)).cpu(),
                              torch.view_as_real(pairs * cis), atol=1e-4):
            return f"its {step} differ from the CPU's"
        step = "top-k, sort and cumsum (sampling)"
        values, rows = torch.topk(logits.to(device), 30)
        ordered = torch.sort(logits.to(device), descending=True).values
        total = torch.cumsum(ordered.softmax(-1), dim=-1)[:, -1]
        if not (torch.equal(rows.cpu(), torch.argsort(logits, dim=-1, descending=True)[:, :30])
                and torch.allclose(values.cpu(), ordered[:, :30].cpu()) and torch.allclose(total.cpu(), torch.ones(4))):
            return f"its {step} differ from the CPU's"
        step = "uniform draws from its own generator"
        u = torch.empty(1000, device=device).uniform_(generator=torch.Generator(device=device).manual_seed(1))
        if not bool(((u >= 0) & (u < 1)).all()):
            return f"its {step} fall outside [0, 1)"
    except Exception as exc:  # noqa: BLE001 - any failure of the device is the answer
        return f"{step}: {str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__}"
    return None


def device_options() -> tuple[DeviceOption, ...]:
    """Which devices this computer has for the model, and for those it lacks, why (the studio's settings grey
    them out with the reason instead of failing a load)."""
    cuda = torch.cuda.is_available() and gpu_problem("cuda") is None
    if cuda:
        names = ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
        cuda_option = DeviceOption("cuda", True, names)
    elif torch.cuda.is_available():
        cuda_option = DeviceOption("cuda", False, f"the NVIDIA GPU failed its self-test ({gpu_problem('cuda')})")
    elif torch.version.cuda is None:
        cuda_option = DeviceOption("cuda", False, "this build of S2 Studio has no CUDA support; the CUDA download "
                                                  "uses the NVIDIA GPU found here" if nvidia_gpu_present() else
                                                  "this build of PyTorch has no CUDA support")
    else:
        cuda_option = DeviceOption("cuda", False, "no NVIDIA GPU found")
    mps = _mps_available() and gpu_problem("mps") is None
    return (DeviceOption("auto", True, "the GPU" if cuda or mps else "the CPU (no GPU found)"),
            DeviceOption("cpu", True, ""), cuda_option,
            DeviceOption("mps", mps, "" if mps else f"the Apple GPU failed its self-test ({gpu_problem('mps')})"
                         if _mps_available() else "only on Macs with Apple silicon"))


def nvidia_gpu_present() -> bool:
    """An NVIDIA driver is installed (its `nvidia-smi` is on PATH, or Linux lists a GPU), whatever torch was built
    with: where this torch has no CUDA, the studio says the CUDA download would use it."""
    from pathlib import Path

    gpus = Path("/proc/driver/nvidia/gpus")
    return shutil.which("nvidia-smi") is not None or (gpus.is_dir() and any(gpus.iterdir()))
