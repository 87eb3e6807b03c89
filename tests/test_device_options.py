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
