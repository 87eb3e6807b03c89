"""A small Qwen3-style byte-level BPE `tokenizer.json` with S2's added tokens, built from nothing.

S2 ships Qwen3's tokenizer (151,643 BPE tokens) followed by added tokens: Qwen3's 26, Fish's nine and
the 4096 `<|semantic:i|>` tokens, in that id order (spec §2). A demo folder needs the same *shape* —
same normalizer, split regex, byte-level mapping and added-token order — but not the 150k merges, so we
learn a few hundred merges from a fixed sample text. The learner is our own, written out in full, so the
merges (hence every token id, hence every golden code) depend on nothing but this file: not on the
`tokenizers` trainer's version or thread count.

The file is written as JSON by hand (sorted where order is free) so that the bytes are reproducible.
"""

from __future__ import annotations

import functools
import json
from collections import Counter

QWEN2_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
"""The pre-tokenizer regex of Qwen2/Qwen3's `tokenizer.json` (one digit per piece, letters with one leading
non-letter, punctuation runs)."""

QWEN3_ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", True),
    ("<|fim_middle|>", True),
    ("<|fim_suffix|>", True),
    ("<|fim_pad|>", True),
    ("<|repo_name|>", True),
    ("<|file_sep|>", True),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
)
"""Qwen3's added tokens in id order (151643…151668 in S2) and their `special` flag."""

FISH_ADDED_TOKENS: tuple[str, ...] = (
    "<|pad|>",
    "<|phoneme_start|>",
    "<|phoneme_end|>",
    "<|text|>",
    "<|voice|>",
    "<|interleave|>",
    "<|audio_start|>",
    "<|audio_end|>",
    "<|audio_pad|>",
)
"""Fish's nine tokens, in id order (151669…151677 in S2)."""

NUM_SEMANTIC_TOKENS = 4096
DEFAULT_NUM_MERGES = 400

SAMPLE_TEXT = """\
The quick brown fox jumps over the lazy dog. She sells sea shells by the sea shore, and the shells
she sells are surely sea shells. Peter Piper picked a peck of pickled peppers; how many pickled peppers
did Peter Piper pick? It was the best of times, it was the worst of times, it was the age of wisdom,
it was the age of foolishness, it was the epoch of belief, it was the epoch of incredulity.
Hello there! How are you today? I'm fine, thanks. We'll see you tomorrow at 10:30 in the morning.
Did you hear that? Someone is at the door. It's only the cat, don't worry. They've gone home already.
Once upon a time, in a quiet village by the river, there lived an old storyteller who remembered every
song the wind had ever sung. Children gathered around him in the evening, and he spoke softly, slowly,
with long pauses between the words, until the stars came out and the fire burned low.
Welcome to the studio. Record a voice, write a script, and listen while it renders. The speaker reads
each line in order, with feeling: laughter, whispers, sighs and excitement, exactly where you ask.
Numbers: 0 1 2 3 4 5 6 7 8 9, 12, 345, 2026, 3.14159, 100%, $42.50, #7, (a), [b], {c}.
Guten Morgen! Wie geht es dir? Ich hoffe, es geht dir gut. Die Sonne scheint über den Bergen.
Bonjour à tous. Je m'appelle Claire et j'habite à Paris depuis trois ans. C'est très agréable.
Hola, ¿cómo estás? Estoy muy bien, gracias. Mañana vamos a la playa con nuestros amigos.
Olá, tudo bem? Eu gosto muito de música e de livros antigos. Ciao, come stai? Benissimo, grazie.
Привет, как дела? Всё хорошо, спасибо. こんにちは、元気ですか。今日はいい天気ですね。
你好，今天天气很好。我们一起去公园散步吧。안녕하세요, 만나서 반갑습니다. مرحبا بكم جميعا.
the the the and and and of of to to in in is is that that it it with with for for as as on on
speaking speaker speech spoken voice voices sound sounds singing laughing whispering shouting
<|im_start|>system
convert the provided text to speech reference to the following:

Text:
<|speaker:0|>Hello.
<|speaker:1|>Hi!

Speech:
<|im_end|>
<|im_start|>user
<|speaker:0|>Good evening, everyone, and thank you for coming.<|im_end|>
<|im_start|>assistant
In the morning the market opens early. Farmers bring apples, pears, carrots, potatoes and fresh bread,
and the town wakes up slowly to the smell of coffee. Later, when the rain starts, everybody hurries
home, laughing, holding newspapers over their heads. The evening is calm; the streets are empty and
the lamps throw long yellow shadows across the wet stones. Somewhere a dog barks, a door closes,
and a radio plays an old song about summer, friendship and the sea.
Please remember: every sentence matters, every pause matters, and every breath tells the listener
something about the person speaking. Read it again, slower this time, and let the silence work.
What would you like to hear next? A poem, a story, a conversation between two friends, or the news?
"It's late," she whispered. "We should go." He nodded, smiled, and said nothing at all.
[laugh] [whisper] [sigh] [excited] [pause] [emphasis] [clearing throat] [short pause] [angry] [sad]
"""
"""A fixed corpus the merges are learned from: mostly English, some of S2's other languages."""


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character map used by every byte-level BPE (Qwen's too).

    Printable Latin-1 bytes map to themselves; the other 68 bytes map to code points from 256 up, in byte
    order. The order of this dict (printable first) is also the id order of the 256 base tokens.
    """
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    mapping = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


def _pretokenize(text: str) -> list[str]:
    """The sample text cut as the tokenizer will cut it (split regex, then bytes mapped to characters)."""
    from tokenizers import Regex, normalizers, pre_tokenizers

    text = normalizers.NFC().normalize_str(text)
    pre = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    return [piece for piece, _ in pre.pre_tokenize_str(text)]


def learn_merges(text: str, num_merges: int) -> list[tuple[str, str]]:
    """Classic BPE training: repeatedly merge the most frequent adjacent pair (ties: the smaller pair).

    Stops early when no pair occurs twice. Quadratic and plain on purpose — the corpus is a few KB.
    """
    words: list[tuple[list[str], int]] = [(list(w), n) for w, n in sorted(Counter(_pretokenize(text)).items())]
    merges: list[tuple[str, str]] = []
    while len(merges) < num_merges:
        pairs: Counter[tuple[str, str]] = Counter()
        for symbols, count in words:
            for pair in zip(symbols, symbols[1:]):
                pairs[pair] += count
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        if pairs[best] < 2:
            break
        merges.append(best)
        joined = best[0] + best[1]
        for symbols, _ in words:
            i = 0
            while i < len(symbols) - 1:
                if symbols[i] == best[0] and symbols[i + 1] == best[1]:
                    symbols[i : i + 2] = [joined]
                i += 1
    return merges


@functools.lru_cache(maxsize=4)
def _merges(num_merges: int) -> tuple[tuple[str, str], ...]:
    return tuple(learn_merges(SAMPLE_TEXT, num_merges))


def added_token_contents(num_semantic: int = NUM_SEMANTIC_TOKENS) -> list[tuple[str, bool]]:
    """Every added token in id order with its `special` flag: Qwen3's, Fish's, then the semantic tokens."""
    tokens = list(QWEN3_ADDED_TOKENS)
    tokens += [(t, True) for t in FISH_ADDED_TOKENS]
    tokens += [(f"<|semantic:{i}|>", True) for i in range(num_semantic)]
    return tokens


def build_tokenizer_json(num_merges: int = DEFAULT_NUM_MERGES, num_semantic: int = NUM_SEMANTIC_TOKENS) -> dict:
    """The `tokenizer.json` document (a dict; `dumps_tokenizer_json` serialises it)."""
    vocab: dict[str, int] = {}
    for ch in bytes_to_unicode().values():
        vocab[ch] = len(vocab)
    merges = _merges(num_merges)
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    added = [
        {
            "id": len(vocab) + i,
            "content": content,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": special,
        }
        for i, (content, special) in enumerate(added_token_contents(num_semantic))
    ]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": QWEN2_SPLIT_PATTERN}, "behavior": "Isolated", "invert": False},
                byte_level,
            ],
        },
        "post_processor": dict(byte_level),
        "decoder": dict(byte_level),
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": "",
            "end_of_word_suffix": "",
            "fuse_unk": False,
            "byte_fallback": False,
            "vocab": vocab,
            "merges": [f"{a} {b}" for a, b in merges],
        },
    }


def dumps_tokenizer_json(doc: dict) -> str:
    """Serialise as HF does (UTF-8, not ASCII-escaped), with a fixed layout so equal inputs give equal bytes."""
    return json.dumps(doc, ensure_ascii=False, indent=2) + "\n"


def token_count(doc: dict) -> int:
    """Ids in use: the BPE vocabulary plus the added tokens (ids are dense from 0)."""
    return len(doc["model"]["vocab"]) + len(doc["added_tokens"])


def tokenizer_config_json(doc: dict) -> dict:
    """A plausible `tokenizer_config.json` (transformers reads it; upstream and we do not)."""
    decoder = {
        str(t["id"]): {k: t[k] for k in ("content", "lstrip", "normalized", "rstrip", "single_word", "special")}
        for t in doc["added_tokens"]
        if not t["content"].startswith("<|semantic:")
    }
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": decoder,
        "bos_token": None,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 32768,
        "pad_token": "<|pad|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }


def special_tokens_map_json() -> dict:
    """A plausible `special_tokens_map.json`."""
    def entry(content: str) -> dict:
        return {"content": content, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False}

    return {
        "additional_special_tokens": [t for t, special in QWEN3_ADDED_TOKENS if special and t != "<|endoftext|>"]
        + list(FISH_ADDED_TOKENS),
        "eos_token": entry("<|im_end|>"),
        "pad_token": entry("<|pad|>"),
    }
