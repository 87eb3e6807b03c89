"""Our generation is code-identical to an independent S2 implementation (issue 2's acceptance test).

`tests/golden/lm/*.npz` were written by `tools/make_lm_goldens.py`: it built a seeded demo model folder with
`s2studio.demo_model`, ran the independent port `mizuoto-fishspeech`'s own `generate_long` on it (CPU, fp32,
one thread, slow attention over upstream's full static cache) and stored every batch's codes, the prompt
matrix the port built for it, and the inputs. Here we rebuild the same folder from the same seed, load it
with our loader and generate with our engine: every code of every batch must be equal.

Float kernels differ between torch builds and CPU instruction sets (spec §11.1), so the goldens are kept per
capability (`golden_sets.py`: `lm/` recorded on AVX512, `lm/AVX2/`, ...) and only the set recorded on this
machine's capability and torch release binds the codes; with none, those cases skip, saying why. The inputs
(model digest, prompt matrices) are checked in every set. With torch 2.14.1 the port wrote the same codes on
AVX512 and on AVX2 in all 14 cases (the sets differ only in their meta), and ours equal them on both.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from golden_sets import binding_set, recorded_sets, why_unbound

from s2studio.demo_model import folder_digest, write_demo_model
from s2studio.engine.s2.generate import ExactDecoder, generate_codes
from s2studio.engine.weights.checkpoints import load_dual_ar
from s2studio.settings import Sampling
from s2studio.text.prompt import Exchange, Reference, build_prompt, upstream_batches
from s2studio.text.tokenizer import S2Tokenizer

SETS = recorded_sets("lm")
BINDING = binding_set("lm")
FILES = sorted(BINDING.folder.glob("*.npz")) if BINDING else sorted(SETS[0].folder.glob("*.npz"))
"""The files whose codes bind here; with no set for this machine, the first set's, whose cases then skip."""
EVERY_FILE = [f for found in SETS for f in sorted(found.folder.glob("*.npz"))]
"""Every set's files: their inputs do not depend on the machine."""


def _id(file: Path) -> str:
    return str(file.relative_to(SETS[0].folder).with_suffix(""))


def _load(file: Path) -> tuple[dict, dict[str, np.ndarray]]:
    with np.load(file) as data:
        arrays = {k: data[k] for k in data.files}
    return json.loads(str(arrays.pop("meta"))), arrays


def _series(arrays: dict[str, np.ndarray], prefix: str) -> list[np.ndarray]:
    out = []
    while f"{prefix}_{len(out)}" in arrays:
        out.append(arrays[f"{prefix}_{len(out)}"].astype(np.int64))
    return out


class Models:
    """Demo folders and loaded models, one per distinct set of generator arguments (shared by the cases)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.folders: dict[str, Path] = {}
        self.loaded: dict[str, tuple[object, S2Tokenizer]] = {}

    def folder(self, model_args: dict) -> Path:
        key = json.dumps(model_args, sort_keys=True)
        if key not in self.folders:
            self.folders[key] = write_demo_model(self.root / f"m{len(self.folders)}", codec=False, **model_args)
        return self.folders[key]

    def load(self, model_args: dict) -> tuple[object, S2Tokenizer]:
        key = json.dumps(model_args, sort_keys=True)
        if key not in self.loaded:
            folder = self.folder(model_args)
            tok = S2Tokenizer.from_file(folder / "tokenizer.json")
            model = load_dual_ar(folder, device="cpu", dtype=torch.float32,
                                 semantic_range=(tok.semantic_begin_id, tok.semantic_end_id), im_end_id=tok.im_end_id)
            self.loaded[key] = (model, tok)
        return self.loaded[key]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Models:
    return Models(tmp_path_factory.mktemp("golden-models"))


def _skip_if_other_environment(meta: dict) -> None:
    """Skip a case whose codes were recorded on another capability or torch release (no set binds here)."""
    if BINDING is None or meta["cpu_capability"] != BINDING.cpu_capability or meta["torch"] != BINDING.torch:
        pytest.skip(why_unbound("lm"))


def test_golden_files_present() -> None:
    for found in SETS:
        names = {f.stem for f in found.folder.glob("*.npz")}
        assert {"no_reference", "one_reference", "two_references_one_tagged", "dialogue_chunk40",
                "hits_max_new_tokens", "text_before_first_tag"} <= names, found.describe()
        assert names == set(found.manifest["cases"]), found.describe()
    assert len({frozenset(found.manifest["cases"]) for found in SETS}) == 1, "every set holds the same cases"


@pytest.mark.parametrize("found", SETS, ids=[s.cpu_capability for s in SETS])
def test_each_file_was_made_where_its_set_says(found) -> None:
    """A file's own meta names the machine that wrote it: it must be its set's (no mixed sets)."""
    for file in sorted(found.folder.glob("*.npz")):
        meta, _ = _load(file)
        made = {k: meta[k] for k in ("cpu_capability", "torch", "threads", "reference", "machine")}
        assert made == {k: found.manifest[k] for k in made}, file.name
        assert made["threads"] == 1 and meta["device"] == "cpu" and meta["dtype"] == "float32"


def test_the_set_of_the_running_capability_binds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """golden_sets on a made-up tree: the first set at `lm/`, others in `lm/<CAPABILITY>/`; a subfolder that is
    not named after its manifest's capability (`codec/full/`) is another kind, not a set."""
    import golden_sets

    release = torch.__version__.split("+")[0]
    for folder, capability, version in (("lm", "AVX512", release + "+cu130"), ("lm/AVX2", "AVX2", release),
                                        ("lm/VSX", "VSX", "1.0.0"), ("codec", "AVX512", release),
                                        ("codec/full", "AVX512", release)):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "manifest.json").write_text(json.dumps({"cpu_capability": capability, "torch": version}))
    monkeypatch.setattr(golden_sets, "GOLDEN", tmp_path)
    here = {"now": "AVX2"}
    monkeypatch.setattr(golden_sets, "running_capability", lambda: here["now"])

    assert [s.folder.name for s in golden_sets.recorded_sets("codec")] == ["codec"]
    assert golden_sets.binding_set("lm").folder == tmp_path / "lm" / "AVX2"
    assert golden_sets.folder_to_write("lm") == tmp_path / "lm" / "AVX2"
    here["now"] = "AVX512"
    assert golden_sets.binding_set("lm").folder == tmp_path / "lm"  # the local build tag (+cu130) is no matter
    assert golden_sets.folder_to_write("lm") == tmp_path / "lm"
    here["now"] = "VSX"  # recorded, but with another torch
    assert golden_sets.binding_set("lm") is None
    assert golden_sets.folder_to_write("lm") == tmp_path / "lm" / "VSX"
    here["now"] = "DEFAULT"
    assert golden_sets.binding_set("lm") is None and golden_sets.folder_to_write("lm") == tmp_path / "lm" / "DEFAULT"
    why = golden_sets.why_unbound("lm")
    assert why.startswith(f"no lm goldens for a DEFAULT CPU with torch {release}") and "tools/make_lm_goldens.py" in why
    assert f"AVX512 with torch {release}+cu130 ({tmp_path.parent.name}/{tmp_path.name}/lm)" in why
    assert "VSX with torch 1.0.0" in why
    assert golden_sets.why_unbound("codec/full").endswith("tools/make_codec_goldens.py --full")


@pytest.mark.parametrize("file", EVERY_FILE, ids=[_id(f) for f in EVERY_FILE])
def test_demo_folder_is_the_one_the_goldens_ran_on(file: Path, models: Models) -> None:
    meta, _ = _load(file)
    assert folder_digest(models.folder(meta["model"])) == meta["model_digest"], (
        "the demo model generator no longer writes the folder these goldens were made on; "
        "regenerate them with tools/make_lm_goldens.py")


@pytest.mark.parametrize("file", EVERY_FILE, ids=[_id(f) for f in EVERY_FILE])
def test_prompt_matrices_match_the_port(file: Path, models: Models) -> None:
    meta, arrays = _load(file)
    _, tok = models.load(meta["model"])
    refs = [Reference(t, c) for t, c in zip(meta["reference_texts"], _series(arrays, "reference_codes"), strict=True)]
    batches = upstream_batches(meta["text"], meta["chunk_length"])
    assert batches == meta["batches"]
    codes, prompts = _series(arrays, "codes"), _series(arrays, "prompt")
    history: list[Exchange] = []
    for i, text in enumerate(batches):
        ours = build_prompt(tok, refs, history, text)
        np.testing.assert_array_equal(ours, prompts[i], err_msg=f"prompt of batch {i}")
        history.append(Exchange(text, codes[i]))


@pytest.mark.parametrize("file", FILES, ids=[f.stem for f in FILES])
def test_codes_equal_the_port(file: Path, models: Models) -> None:
    meta, arrays = _load(file)
    _skip_if_other_environment(meta)
    model, tok = models.load(meta["model"])
    refs = [Reference(t, c) for t, c in zip(meta["reference_texts"], _series(arrays, "reference_codes"), strict=True)]
    sampling = Sampling(temperature=meta["temperature"], top_p=meta["top_p"], top_k=meta["top_k"],
                        max_frames=meta["max_new_tokens"], seed_mode="fixed", seed=meta["seed"])
    ours = generate_codes(ExactDecoder(model), tok, meta["text"], references=refs, sampling=sampling,
                          batching="upstream", chunk_length=meta["chunk_length"])
    expected = _series(arrays, "codes")
    assert [c.shape[1] for c in ours] == [c.shape[1] for c in expected], "frames per batch"
    for i, (a, b) in enumerate(zip(ours, expected, strict=True)):
        np.testing.assert_array_equal(a, b, err_msg=f"codes of batch {i}")


def test_goldens_cover_stopping_and_the_limit() -> None:
    """The goldens must contain batches that ended on <|im_end|> and batches cut by max_new_tokens, and the demo
    model's residual codebooks stay below S2's 1024 codes (as a trained head's do)."""
    stopped = limited = 0
    for file in FILES:
        meta, arrays = _load(file)
        assert all(int(c[1:].max(initial=0)) < 1024 for c in _series(arrays, "codes")), file.stem
        for frames in meta["frames"]:
            if frames == meta["max_new_tokens"] - 1:
                limited += 1
            else:
                stopped += 1
    assert stopped >= 3 and limited >= 2


@pytest.mark.parametrize("case", ["dialogue_chunk40", "untagged_whitespace"])
def test_synth_command_writes_the_golden_codes(case: str, models: Models, tmp_path: Path) -> None:
    """`s2studio synth --batching upstream --codes-out` end to end: the batches' codes concatenated in time."""
    from s2studio.cli import main as cli_main

    meta, arrays = _load(next(f for f in FILES if f.stem == case))
    _skip_if_other_environment(meta)
    folder = models.folder(meta["model"])
    args = ["synth", "--model", str(folder), "--text", meta["text"], "--seed", str(meta["seed"]),
            "--device", "cpu", "--precision", "fp32", "--threads", "1", "--batching", "upstream",
            "--chunk-length", str(meta["chunk_length"]), "--max-new-tokens", str(meta["max_new_tokens"]),
            "--temperature", str(meta["temperature"]), "--top-p", str(meta["top_p"]), "-q",
            "--codes-out", str(tmp_path / "codes.npy")]
    for i, (text, codes) in enumerate(zip(meta["reference_texts"], _series(arrays, "reference_codes"), strict=True)):
        np.save(tmp_path / f"ref{i}.npy", codes)
        args += ["--reference-codes", str(tmp_path / f"ref{i}.npy"), "--reference-text", text]
    assert cli_main(args) == 0
    written = np.load(tmp_path / "codes.npy")
    assert written.dtype == np.int64
    np.testing.assert_array_equal(written, np.concatenate(_series(arrays, "codes"), axis=1))
