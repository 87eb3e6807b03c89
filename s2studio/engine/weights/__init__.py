"""The weights layer: a checkpoint folder in, a `DualAR` with narrowed linear layers out (torch, no runtime).

`checkpoints.load_dual_ar` reads, checks and assigns; `narrow.py` swaps the linear layers for the plain layer
types `bf16.Bf16Linear`, `int8.Int8Linear` and `int4.Int4Linear` before the cast; `cpu_gemv` calls the CPU
kernels they use (built when the package is built: `kernel_build`; loaded by `kernels`). Nothing here imports the runtime (`engine.s2`): imports point down only.
"""
