"""Offline stand-ins for the ``trl-internal-testing/*`` models and datasets that TRL's own GRPO tests load from the
Hub (``tests/test_grpo_trainer.py``; see ``tests/test_trl_suite.py`` for the commit). No network, ever: every model
is a config with random weights, every tokenizer and processor is built in code, and each is saved to a local folder
so that TRL loads it exactly as it loads a Hub id (``from_pretrained`` on a string).

Text models (Qwen3, Qwen3-MoE, the Qwen2.5 reward model) keep the real tokenizers' ids where TRL's tests hard-code
them (their fake ``generate`` returns Qwen token ids): a byte-level tokenizer whose first 256 ids are GPT-2's byte
alphabet (as Qwen's are), the handful of multi-byte tokens those tests use at their Qwen ids, Qwen's special tokens at
their ids, and TRL's own copy of the Qwen chat template (the one TRL recognises to parse tool calls). The sizes follow
TRL's ``scripts/generate_tiny_models`` (vocab, hidden sizes, experts), in float32.

Vision-language models (Gemma 3, LLaVA-NeXT, Qwen2-VL, Qwen2.5-VL) are built from their configs with tiny vision
towers and image sizes, with their real processor classes (image processor + tokenizer + TRL's copy of each chat
template); no TRL test hard-codes their token ids, so their tokenizers are byte-level with the model's special tokens
appended.
"""

from __future__ import annotations

from pathlib import Path

import trl
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

TEMPLATES = Path(trl.__file__).parent / "chat_templates"

# ---------------------------------------------------------------------------------------------------------------------
# Tokenizers


def _byte_alphabet() -> list[str]:
    """GPT-2's ``bytes_to_unicode`` characters in id order (Qwen's ids 0-255)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    chars = [chr(b) for b in printable]
    n = 0
    for b in range(256):
        if b not in printable:
            chars.append(chr(256 + n))
            n += 1
    return chars


#: Qwen2/Qwen3 multi-byte tokens that TRL's GRPO tests hard-code (byte-level strings: Ġ is a space, Ċ a newline).
QWEN_TOKENS = {
    4913: '{"',
    606: "name",
    788: '":',
    330: 'Ġ"',
    64648: "multiply",
    22785: "_tool",
    7692: "async",
    93054: "_multiply",
    497: '",',
    16370: "arguments",
    5212: 'Ġ{"',
    11248: "}}Ċ",
    1513: "Ġdon",
    944: "'t",
    1414: "Ġknow",
    894: "Ġany",
    5392: "Ġtool",
    17453: "Done",
    35744: "increment",
    450: "dec",
    13477: "rement",
    9520: "step",
    2765: "Ġwon",
    16252: "Ġincrement",
    927: "sh",
    411: "out",
    1318: "text",
    6023: "hi",
    95642: '"}}Ċ',
    14172: "tool",
    6659: "call",
    397: ">Ċ",
    522: "</",
    314: "Ġ{",
    293: "Ġb",
}
#: Qwen's added tokens from <|endoftext|> (151643) on, in id order; ``True`` marks the special ones.
QWEN_ADDED = [
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
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
]
QWEN_BASE_VOCAB = 151643


def byte_level_tokenizer(
    base_size: int, fixed: dict[int, str], added: list[tuple[str, bool]], **special
) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer without merges (every byte is a token, so any template is prefix-preserving):
    ids 0-255 the byte alphabet, ``fixed`` tokens at their ids, filler tokens up to ``base_size``, then ``added``
    tokens (``(content, special)``) from ``base_size`` on. ``special``: eos_token, pad_token, ... by content."""
    vocab = {c: i for i, c in enumerate(_byte_alphabet())}
    for i, token in fixed.items():
        vocab[token] = i
    taken = set(vocab.values())
    for i in range(256, base_size):
        if i not in taken:
            vocab[f"tok{i}"] = i
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.decoder = decoders.ByteLevel()
    for content, is_special in added:  # one at a time: ids follow the list's order
        token = AddedToken(content, special=is_special, normalized=False)
        (backend.add_special_tokens if is_special else backend.add_tokens)([token])
    extra = [c for c, s in added if s and c not in special.values()]
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, additional_special_tokens=extra, **special)
    assert len(tokenizer) == base_size + len(added), len(tokenizer)
    return tokenizer


def qwen_tokenizer(template: str = "qwen3") -> PreTrainedTokenizerFast:
    tokenizer = byte_level_tokenizer(
        QWEN_BASE_VOCAB, QWEN_TOKENS, QWEN_ADDED, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    tokenizer.chat_template = (TEMPLATES / f"{template}.jinja").read_text(encoding="utf-8")
    tokenizer.padding_side = "left"
    return tokenizer
