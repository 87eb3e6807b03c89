"""The devices this computer has, as the engine thread reports them to the settings (engine/s2/device.py)."""

from __future__ import annotations

import torch

from s2studio.engine.s2.device import device_options


def test_device_options_say_what_this_computer_has_and_why_not() -> None:
    options = {o.name: o for o in device_options()}
    assert list(options) == ["auto", "cpu", "cuda", "mps"]
    assert options["cpu"].available and options["auto"].available
    cuda = options["cuda"]
    assert cuda.available == torch.cuda.is_available()
    if cuda.available:  # the GPU's name, e.g. "NVIDIA H200"
        assert cuda.reason == torch.cuda.get_device_name(0) or cuda.reason.startswith(torch.cuda.get_device_name(0))
    else:
        assert cuda.reason in ("no NVIDIA GPU found", "this build of PyTorch has no CUDA support")


# ----------------------------------------------------------------------------- the GPU self-test

import pytest  # noqa: E402

from s2studio.engine.s2 import device  # noqa: E402
from s2studio.errors import UserError  # noqa: E402


@pytest.fixture()
def fresh_self_test():
    device.gpu_problem.cache_clear()
    yield
    device.gpu_problem.cache_clear()


def test_the_self_test_passes_where_every_op_agrees_with_the_cpu(fresh_self_test) -> None:
    assert device.gpu_problem("cpu") is None


def test_the_self_test_names_the_op_that_fails(fresh_self_test, monkeypatch) -> None:
    def no_complex(*args, **kwargs):
        raise RuntimeError("MPS does not support complex types on this macOS\nmore detail")

    monkeypatch.setattr(torch, "view_as_complex", no_complex)
    assert device.gpu_problem("cpu") == "complex products (RoPE): MPS does not support complex types on this macOS"
    device.gpu_problem.cache_clear()
    monkeypatch.undo()
    real = torch.topk
    monkeypatch.setattr(torch, "topk", lambda x, k: (real(x, k).values, real(x, k).indices.flip(-1)))
    assert device.gpu_problem("cpu") == "its top-k, sort and cumsum (sampling) differ from the CPU's"


def test_a_gpu_that_fails_its_self_test_gives_way_to_the_cpu(fresh_self_test, monkeypatch, caplog) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(device, "gpu_problem", lambda name: "float32 products: no kernel image is available")
    assert device.resolve_device("auto") == torch.device("cpu")
    assert "the GPU (cuda) failed its self-test, the CPU serves: float32 products" in caplog.text
    with pytest.raises(UserError, match=r"the GPU \(cuda\) failed its self-test: float32 products: no kernel image "
                                        r"is available; use --device cpu"):
        device.resolve_device("cuda")
    cuda = next(o for o in device.device_options() if o.name == "cuda")
    assert not cuda.available and "failed its self-test" in cuda.reason


def test_a_cpu_build_on_a_machine_with_an_nvidia_gpu_points_to_the_cuda_download(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(device, "nvidia_gpu_present", lambda: True)
    cuda = next(o for o in device.device_options() if o.name == "cuda")
    assert not cuda.available and "the CUDA download uses the NVIDIA GPU found here" in cuda.reason
    monkeypatch.setattr(device, "nvidia_gpu_present", lambda: False)
    cuda = next(o for o in device.device_options() if o.name == "cuda")
    assert cuda.reason == "this build of PyTorch has no CUDA support"
