"""Large narrowed weights live on 2 MiB pages (engine/weights/pages.py): the same bytes, fewer TLB misses."""

from __future__ import annotations

import pytest
import torch

from s2studio.engine.weights import pages
from s2studio.engine.weights.bf16 import Bf16Linear
from s2studio.engine.weights.int4 import Int4Linear
from s2studio.engine.weights.int8 import Int8Linear

huge_pages_here = pytest.mark.skipif(not pages.huge_pages_offered(), reason="no transparent huge pages on this OS")


def test_a_copy_holds_the_same_values_in_the_same_shape_and_type() -> None:
    t = torch.randint(-127, 128, (1500, 2561), dtype=torch.int8)  # 3.7 MiB: one whole huge page and a tail
    copy = pages.on_huge_pages(t)
    assert copy.dtype == t.dtype and copy.shape == t.shape and copy.is_contiguous() and torch.equal(copy, t)
    wide = torch.randn(700, 1024).to(torch.bfloat16).view(torch.int16)
    assert torch.equal(pages.on_huge_pages(wide), wide)


def test_small_or_device_tensors_are_returned_as_they_are() -> None:
    small = torch.zeros(1000, 1000, dtype=torch.int8)  # under one huge page: nothing to gain
    assert pages.on_huge_pages(small) is small
    meta = torch.empty(4096, 4096, device="meta")
    assert pages.on_huge_pages(meta) is meta


@huge_pages_here
def test_the_copy_starts_on_a_huge_page_and_its_whole_huge_pages_are_huge() -> None:
    t = torch.randint(0, 255, (5 << 20,), dtype=torch.uint8)
    copy = pages.on_huge_pages(t)
    assert copy.data_ptr() % pages.HUGE_PAGE == 0
    assert pages.huge_page_bytes(copy) >= 4 << 20  # 5 MiB: two whole huge pages (the 1 MiB tail stays 4 KiB)


@huge_pages_here
def test_the_narrowed_layers_stream_from_huge_pages_and_compute_what_they_did(monkeypatch) -> None:
    g = torch.Generator().manual_seed(5)
    w = torch.randn(2048, 2048, generator=g) * 0.02
    linear = torch.nn.Linear(2048, 2048, bias=False).requires_grad_(False)
    linear.weight.copy_(w.to(torch.bfloat16).float())
    x = torch.randn(3, 2048, generator=g)

    def layers():
        return Int8Linear.from_linear(linear), Int4Linear.from_linear(linear), Bf16Linear(linear.weight)

    huge = layers()
    for layer, buffer in zip(huge, ("weight_q", "nibbles", "bits"), strict=True):
        assert pages.huge_page_bytes(getattr(layer, buffer)) >= pages.HUGE_PAGE, buffer
    for module in ("int8", "int4", "bf16"):  # the same layers on the allocator's 4 KiB pages
        monkeypatch.setattr(f"s2studio.engine.weights.{module}.on_huge_pages", lambda t: t)
    plain = layers()
    for a, b in zip(huge, plain, strict=True):
        assert torch.equal(a(x), b(x)), type(a).__name__


def _mapped(address: int) -> bool:
    """Whether `address` lies in one of this process's mappings (/proc/self/maps)."""
    with open("/proc/self/maps", encoding="ascii") as f:
        for line in f:
            low, high = (int(v, 16) for v in line.split(None, 1)[0].split("-"))
            if low <= address < high:
                return True
    return False


@huge_pages_here
def test_the_pages_are_given_back_with_the_last_tensor_that_uses_them() -> None:
    """Each copy is a mapping of its own: a weight dropped (a model unloaded, a LoRA merged again) frees it."""
    import gc

    copy = pages.on_huge_pages(torch.ones(3 << 20, dtype=torch.uint8))
    view = copy.view(torch.int16)
    address = copy.data_ptr()
    del copy
    gc.collect()
    assert _mapped(address) and int(view[0]) == 0x0101  # a view keeps it
    del view
    gc.collect()
    assert not _mapped(address)
