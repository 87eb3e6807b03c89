"""S2's text tokenizer: Qwen3's byte-level BPE plus Fish's special and semantic tokens.

We read `tokenizer.json` with the `tokenizers` library, which gives the same ids as upstream's
`transformers` fast tokenizer (spec §2.1). Text is always encoded without added BOS/EOS; special
tokens written literally in the text (`<|im_start|>` …) are matched as single tokens.

The semantic range is derived the way upstream derives it (spec §2.3): scan `<|semantic:0|>` …
`<|semantic:4095|>`, keep the ones present, take min and max. The tokenizer wins over the
config's `semantic_start_token_id`, so a checkpoint with a stale config still decodes right.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tokenizers import Tokenizer

from s2studio.errors import UserError

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
VOICE = "<|voice|>"
SEMANTIC_SCAN = 4096
"""Upstream scans exactly this many `<|semantic:i|>` names, whatever the codebook size."""


def semantic_token(code: int) -> str:
    return f"<|semantic:{code}|>"


class S2Tokenizer:
    """The tokenizer plus the ids the language model needs."""

    def __init__(self, tokenizer: Tokenizer, source: str = "tokenizer") -> None:
        self._tok = tokenizer
        self.source = source
        present = [tokenizer.token_to_id(semantic_token(i)) for i in range(SEMANTIC_SCAN)]
        ids = [i for i in present if i is not None]
        if not ids:
            raise UserError(f"{source} has no <|semantic:N|> tokens; it is not an S2 tokenizer")
        self.semantic_begin_id: int = min(ids)
        self.semantic_end_id: int = max(ids)
        self.im_start_id = self.token_id(IM_START)
        self.im_end_id = self.token_id(IM_END)
        self.voice_id = self.token_id(VOICE)

    @classmethod
    def from_file(cls, path: str | Path) -> S2Tokenizer:
        path = Path(path)
        if not path.is_file():
            raise UserError(f"tokenizer file not found: {path}")
        try:
            tok = Tokenizer.from_file(str(path))
        except Exception as exc:  # the library raises a bare Exception with a JSON parse message
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise UserError(f"cannot read tokenizer {path}: {first}") from exc
        return cls(tok, source=str(path))

    @property
    def vocab_size(self) -> int:
        """Ids the tokenizer knows, added tokens included (the model's table may be larger)."""
        return self._tok.get_vocab_size(with_added_tokens=True)

    def token_id(self, token: str) -> int:
        """Id of one token by name; a missing special token is a broken model folder."""
        tid = self._tok.token_to_id(token)
        if tid is None:
            raise UserError(f"{self.source} lacks the token {token}; it is not an S2 tokenizer")
        return tid

    def find_id(self, token: str) -> int | None:
        """Id of one token by name, or None when the vocabulary lacks it."""
        return self._tok.token_to_id(token)

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: Sequence[int]) -> str:
        """Text of `ids`, special tokens kept (so a prompt reads back as it was built)."""
        return self._tok.decode(list(ids), skip_special_tokens=False)
