"""LoRA fine-tuning of the S2 language model, as upstream's recipe computes it (spec s2-lora.md).

`presets` names what a LoRA wraps, `layers` is loralib's maths, `rng` the random stream up to the first batch,
`data` the samples and batches, `forward` the training forward and losses, `loop` the optimiser, checkpoints
and resume, `export` the merged model folder. `engine.weights.lora` (below this package) reads LoRA files and
holds the merge formula, which the engine applies at load.
"""
