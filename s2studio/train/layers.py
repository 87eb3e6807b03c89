"""loralib's `Linear` and `Embedding` (merge_weights, no fan_in_fan_out), as layers of our own (spec s2-lora.md §1.2).

A wrapped layer keeps a frozen float32 copy of the base weight (loralib builds its layer in the default dtype and
copies the checkpoint's values in: exact for bf16 weights), the trainable `lora_A` and `lora_B` beside it, and adds
the low-rank path in place after the base op: `y += ((drop(x) @ Aᵀ) @ Bᵀ) · α/r` for a linear, `y += (Aᵀ[i] @ Bᵀ) · α/r`
for an embedding (no dropout). The op order is loralib's, because the loss is compared bit for bit.

Parameters are registered in loralib's order (weight, bias, lora_A, lora_B), since the optimiser's groups and the
gradient norm follow `named_parameters()`.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from s2studio.train.presets import LoraPreset, LoraTarget, lora_targets


class LoraLinear(nn.Module):
    def __init__(self, base: nn.Linear, a: Tensor, b: Tensor, scaling: float, dropout: float) -> None:
        super().__init__()
        self.in_features, self.out_features = base.in_features, base.out_features
        self.weight = nn.Parameter(base.weight.detach().to(torch.float32, copy=True), requires_grad=False)
        self.bias = (None if base.bias is None
                     else nn.Parameter(base.bias.detach().to(torch.float32, copy=True), requires_grad=False))
        self.lora_A = nn.Parameter(a)
        self.lora_B = nn.Parameter(b)
        self.scaling = scaling
        self.lora_dropout: nn.Module = nn.Dropout(p=dropout) if dropout > 0 else nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        result = F.linear(x, self.weight, self.bias)
        result += (self.lora_dropout(x) @ self.lora_A.transpose(0, 1) @ self.lora_B.transpose(0, 1)) * self.scaling
        return result


class LoraEmbedding(nn.Module):
    def __init__(self, base: nn.Embedding, a: Tensor, b: Tensor, scaling: float) -> None:
        super().__init__()
        self.num_embeddings, self.embedding_dim = base.num_embeddings, base.embedding_dim
        self.weight = nn.Parameter(base.weight.detach().to(torch.float32, copy=True), requires_grad=False)
        self.lora_A = nn.Parameter(a)
        self.lora_B = nn.Parameter(b)
        self.scaling = scaling

    def forward(self, ids: Tensor) -> Tensor:
        result = F.embedding(ids, self.weight)
        after_a = F.embedding(ids, self.lora_A.transpose(0, 1))
        result += (after_a @ self.lora_B.transpose(0, 1)) * self.scaling
        return result


LoraInit = dict[str, tuple[Tensor, Tensor]]
"""Layer path -> the initial (A, B)."""


def attach_lora(model: nn.Module, preset: LoraPreset, init: LoraInit) -> list[LoraTarget]:
    """Replace each target layer of `model` by its LoRA layer, starting from `init`, and freeze everything but
    the LoRA weights (loralib's `mark_only_lora_as_trainable`). Returns the targets."""
    targets = lora_targets(model.config, preset)
    missing = [t.path for t in targets if t.path not in init]
    if missing or len(init) != len(targets):
        extra = sorted(set(init) - {t.path for t in targets})
        raise ValueError(f"initial LoRA does not match the preset: missing {missing[:3]}, extra {extra[:3]}")
    for t in targets:
        parent_name, _, name = t.path.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        old = getattr(parent, name)
        a, b = init[t.path]
        new: nn.Module
        if t.embedding:
            if not isinstance(old, nn.Embedding):
                raise TypeError(f"{t.path} is a {type(old).__name__}, not an embedding")
            new = LoraEmbedding(old, a, b, preset.scaling)
        else:
            if not isinstance(old, nn.Linear):
                raise TypeError(f"{t.path} is a {type(old).__name__}, not a linear layer")
            new = LoraLinear(old, a, b, preset.scaling, preset.dropout)
        setattr(parent, name, new)
    for name, p in model.named_parameters():
        p.requires_grad = "lora_" in name
    return targets


def lora_state(model: nn.Module) -> dict[str, Tensor]:
    """The LoRA weights under upstream's names, as its checkpoint and the port's `lora.safetensors` hold them."""
    return {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items() if "lora" in k}


def load_lora_state(model: nn.Module, state: dict[str, Tensor]) -> None:
    """Copy saved LoRA weights into the wrapped model (resume); names and shapes must match exactly."""
    own = {k: v for k, v in model.named_parameters() if "lora_" in k}
    if set(own) != set(state):
        raise ValueError("checkpoint LoRA layers differ from the model's")
    with torch.no_grad():
        for k, p in own.items():
            if tuple(state[k].shape) != tuple(p.shape):
                raise ValueError(f"{k}: checkpoint shape {tuple(state[k].shape)}, model {tuple(p.shape)}")
            p.copy_(state[k])
