"""The engine in three layers, imports pointing down only (design.md §1, tests/test_layering.py):

- this folder, the seam (torch-free): `api` (requests, events, the `Engine` protocol, the settings of a request),
  `plan` (script + cast + project settings -> requests), `fake` (the tone engine for UI tests), and the engine
  behind HTTP (`remote`, its wire format `remote_wire`, `switch` choosing local or remote); the only engine modules
  `ui/`, `worker/`, `commands/` and `serve/` import without torch;
- `weights/`: a checkpoint folder -> a DualAR with its linear layers narrowed to bf16/int8/int4, the CPU kernels;
- `s2/`, the runtime: `load_runtime`, the real engine, generation, sampling, the fast path, the memory planner.
"""
