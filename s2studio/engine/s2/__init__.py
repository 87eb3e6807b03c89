"""The runtime: the real engine, where torch starts (design.md §1).

`setup.load_runtime` is the one load recipe (studio, `synth`, later `serve` and `train`); `engine.S2Engine`
turns requests into the events of `engine/api.py`; `generate` is the frame loop behind both decoders (`generate`'s
exact one, `fast.FastDecoder`), `sampling` the sampler, `graphs` the CUDA-graph tail, `memory` the memory
planner, `device` the device and precision policy. It imports the weights layer and the seam, never the reverse.
"""

from s2studio.engine.s2.engine import S2Engine

__all__ = ["S2Engine"]
