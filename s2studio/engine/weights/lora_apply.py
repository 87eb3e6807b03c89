"""A LoRA applied to a loaded model: merged into its weights, with the base weights kept for switching back.

Why merged, not applied unmerged beside the layers: merged weights are exactly the exported model's
(`lora.merge_tensor`: the float32 merge, then bfloat16), so a voice rendered with its LoRA gives the codes of the
exported `model.pth` and of upstream's inference on it, bit for bit on the CPU in float32; an unmerged low-rank path
adds the same delta in another order and rounds differently. It also costs nothing per frame, and the exact loop,
the fast path, int8/int4 and the CUDA graphs all run unchanged.

Why keep the base: a render that mixes voices with different LoRAs switches between them line by line. Each layer a
LoRA touches has its base weight kept on the CPU as the checkpoint stored it (bfloat16 for S2), taken from the
checkpoint the first time a layer is touched; switching recomputes the merged weight from that base (never by
subtracting a delta, which would drift) and writes it into the layer, narrowing it again when the model's linear
layers are narrowed (bf16, int8, int4). Memory: the touched layers once more in the checkpoint's dtype (for S2
with `r_8_alpha_16`, every linear and embedding: about the checkpoint's size, 9 GB).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor, nn

from s2studio.engine.weights.checkpoints import read_weights
from s2studio.engine.weights.lora import (
    LoraWeights, check_lora_fits, is_embedding, merge_tensor, model_shapes, read_lora,
)
from s2studio.engine.weights.narrow import NARROW_MODES, Narrow, narrowed_layer, narrowing_of
from s2studio.errors import printable


class LoraSwitch:
    """The LoRA currently merged into `model` (or none) and the base weights needed to change it."""

    def __init__(self, model: nn.Module, model_dir: Path) -> None:
        self.model = model
        self.model_dir = Path(model_dir)
        self.base: dict[str, Tensor] = {}
        self.current: LoraWeights | None = None
        self._shapes: dict[str, tuple[int, ...]] | None = None

    @property
    def digest(self) -> str | None:
        return self.current.digest if self.current is not None else None

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Every tensor of the model's checkpoint and its shape (from the config: narrowed layers hold other ones)."""
        if self._shapes is None:
            self._shapes = model_shapes(self.model.config)
        return self._shapes

    def read(self, path: Path) -> LoraWeights:
        """`path` as a LoRA checked against this model (a UserError if it was trained on another shape)."""
        lora = read_lora(path)
        check_lora_fits(lora, self.shapes(), f"the model {printable(self.model_dir.name)}")
        return lora

    def use(self, lora: LoraWeights | None) -> bool:
        """Merge `lora` (None: the base model) into the model in place; False when it is already the one in use."""
        if (lora.digest if lora else None) == self.digest:
            return False
        touched = set(self.current.pairs if self.current else ()) | set(lora.pairs if lora else ())
        self._keep_base(touched)
        mode = narrowing_of(self.model).mode
        for layer in sorted(touched):
            base = self.base[layer]
            weight = merge_tensor(layer, base, lora) if lora and layer in lora.pairs else base
            self._write(layer, weight, mode)
        self.current = lora
        return True

    def _keep_base(self, layers: set[str]) -> None:
        missing = [layer for layer in layers if layer not in self.base]
        if not missing:
            return
        weights, _ = read_weights(self.model_dir)
        for layer in missing:
            self.base[layer] = weights[layer + ".weight"].detach().to("cpu").clone()
        del weights

    def _write(self, layer: str, weight: Tensor, mode: Narrow) -> None:
        parent_name, _, name = layer.rpartition(".")
        parent = self.model.get_submodule(parent_name) if parent_name else self.model
        module = getattr(parent, name)
        if isinstance(module, (nn.Linear, nn.Embedding)):
            with torch.no_grad():
                module.weight.copy_(weight.to(device=module.weight.device, dtype=module.weight.dtype))
            return
        assert mode in NARROW_MODES and not is_embedding(layer), f"{layer}: {type(module).__name__}"
        bias = getattr(module, "bias", None)
        device = next((t.device for t in module.buffers()), torch.device("cpu"))
        dtype = self.model.embeddings.weight.dtype  # the run dtype every float buffer was cast to at load
        # int8/int4 quantize the bfloat16 values, as `narrow_linears` does
        wide = torch.bfloat16 if mode in ("int8", "int4") else torch.float32
        linear = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None, device="meta")
        linear.weight = nn.Parameter(weight.to(wide), requires_grad=False)
        if bias is not None:
            linear.bias = nn.Parameter(bias.detach().to("cpu", wide), requires_grad=False)
        replaced = narrowed_layer(linear, mode) or linear
        setattr(parent, name, replaced.to(device=device, dtype=dtype))
