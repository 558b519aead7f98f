"""Offline stand-ins for the ``trl-internal-testing/*`` models and datasets that TRL's own GRPO tests load from the
Hub (``tests/test_grpo_trainer.py``, vendored in ``tests/trl_grpo/`` with its commit). No network, ever: every model
is a config with random weights, every tokenizer and processor is built in code, and each is saved to a local folder
so that TRL loads it exactly as it loads a Hub id (``from_pretrained`` on a string).

Text models (Qwen3, Qwen3-MoE, Qwen2.5 and the Qwen2.5 / Qwen3 reward models) keep the real tokenizers' ids where
TRL's tests hard-code them (their fake ``generate`` returns Qwen token ids): a byte-level tokenizer whose first 256 ids
are GPT-2's byte alphabet (as Qwen's are), the handful of multi-byte tokens those tests use at their Qwen ids, Qwen's
special tokens at their ids, and TRL's own copy of the Qwen chat template (the one TRL recognises to parse tool calls).
The sizes follow TRL's ``scripts/generate_tiny_models`` (vocab, hidden sizes, experts), in float32. Each also has a
small-vocabulary variant (``build(..., small_vocab=True)``: the same tokens and template in about 2,000 ids) for the
tests that hard-code no id, where a 152k-wide output layer is most of a CPU training step.

Vision-language models (Gemma 3, LLaVA-NeXT, Qwen2-VL, Qwen2.5-VL) are built from their configs with tiny vision
towers and image sizes, with their real processor classes (image processor + tokenizer + TRL's copy of each chat
template); no TRL test hard-codes their token ids, so their tokenizers are byte-level with the model's special tokens
appended.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
import trl
from datasets import Dataset, Features, Image, List, Value
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


def _sample_tool(a: int, b: int) -> int:
    """
    Adds two integers.

    Args:
        a: The first integer.
        b: The second integer.

    Returns:
        The sum of the two integers.
    """
    return a + b


def _learned_merges(template: str | None, size: int) -> list[tuple[str, str]]:
    """BPE merges learned on chat-rendered zen prompts with a tool schema (what the tests tokenize), so that prompts are
    a few times shorter than one token per byte (the real tokenizers' merges are not available offline)."""
    from tokenizers import trainers
    from transformers.utils import get_json_schema

    texts = list(ZEN_QUESTIONS)
    if template is not None:
        probe = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.BPE(vocab={"a": 0}, merges=[])))
        probe.chat_template = (TEMPLATES / f"{template}.jinja").read_text(encoding="utf-8")
        tools = [get_json_schema(_sample_tool)]
        for question in ZEN_QUESTIONS:
            messages = [{"role": "user", "content": question}]
            texts.append(probe.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True))
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    trainer = trainers.BpeTrainer(
        vocab_size=256 + size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    backend.train_from_iterator(texts * 4, trainer=trainer)
    merges = json.loads(backend.to_str())["model"]["merges"]
    return [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in merges]


def byte_level_tokenizer(
    base_size: int,
    fixed: dict[int, str],
    added: list[tuple[str, bool]],
    merges: list[tuple[str, str]] = (),
    **special,
) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer: ids 0-255 the byte alphabet, ``fixed`` tokens at their ids, the tokens of
    ``merges`` at free ids (or at their fixed id), filler tokens up to ``base_size``, then ``added`` tokens
    (``(content, special)``) from ``base_size`` on. ``special``: eos_token, pad_token, ... by content."""
    vocab = {c: i for i, c in enumerate(_byte_alphabet())}
    for i, token in fixed.items():
        vocab[token] = i
    taken = set(vocab.values())
    free = (i for i in range(256, base_size) if i not in taken)
    for left, right in merges:
        if left + right not in vocab:
            vocab[left + right] = next(free)
    for i in free:
        vocab[f"tok{i}"] = i
    backend = Tokenizer(models.BPE(vocab=vocab, merges=list(merges)))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.decoder = decoders.ByteLevel()
    for content, is_special in added:  # one at a time: ids follow the list's order
        token = AddedToken(content, special=is_special, normalized=False)
        (backend.add_special_tokens if is_special else backend.add_tokens)([token])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, **special)
    assert len(tokenizer) == base_size + len(added), len(tokenizer)
    return tokenizer


def qwen_tokenizer(template: str = "qwen3", small: bool = False) -> PreTrainedTokenizerFast:
    """Qwen's ids (``small=False``), or the same tokens and template in a vocabulary of about 2,000 (for our own
    tests, which write their fake completions as text: a 152k-wide output layer dominates a CPU step)."""
    merges = _learned_merges(template, 1500)
    tokenizer = byte_level_tokenizer(
        256 + len(merges) + len(QWEN_TOKENS) if small else QWEN_BASE_VOCAB,
        QWEN_TOKENS if not small else {},
        QWEN_ADDED,
        merges,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    )
    tokenizer.chat_template = (TEMPLATES / f"{template}.jinja").read_text(encoding="utf-8")
    tokenizer.padding_side = "left"
    return tokenizer


def small_tokenizer(added: list[str], template: str, **special) -> PreTrainedTokenizerFast:
    """A byte-level tokenizer (ids 0-255) with ``added`` special tokens from 256 on, for the VLM stand-ins."""
    merges = _learned_merges(None, 200)
    tokenizer = byte_level_tokenizer(256 + len(merges) + 1, {}, [(t, True) for t in added], merges, **special)
    tokenizer.chat_template = (TEMPLATES / f"{template}.jinja").read_text(encoding="utf-8")
    tokenizer.padding_side = "left"
    return tokenizer


# ---------------------------------------------------------------------------------------------------------------------
# Models


def _init_weights(model: torch.nn.Module) -> None:
    """TRL's ``init_weights_tiny_model`` (scripts/generate_tiny_models/_common.py): no NaNs from random weights."""
    for module in model.modules():
        if isinstance(module, torch.nn.Linear | torch.nn.Conv1d):
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
            torch.nn.init.xavier_uniform_(module.weight)
        elif isinstance(module, torch.nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
        elif isinstance(module, torch.nn.LayerNorm):
            torch.nn.init.ones_(module.weight)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)


def _qwen_ids(tokenizer) -> dict[str, int]:
    """bos/eos/pad ids of a Qwen stand-in tokenizer (Qwen's own ids, or the small vocabulary's)."""
    end, text = tokenizer.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])
    return dict(bos_token_id=text, eos_token_id=end, pad_token_id=text)


def _qwen3_moe(small: bool = False):
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    tokenizer = qwen_tokenizer("qwen3", small=small)
    ids = _qwen_ids(tokenizer)
    config = Qwen3MoeConfig(
        vocab_size=len(tokenizer) if small else 151936,
        hidden_size=8,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=2,
        intermediate_size=32,
        moe_intermediate_size=32,
        num_experts=4,
        num_experts_per_tok=2,
        norm_topk_prob=True,
        head_dim=128,
        **ids,
    )
    model = Qwen3MoeForCausalLM(config)
    _init_weights(model)
    return model, tokenizer, [ids["eos_token_id"], ids["pad_token_id"]]


def _qwen3(small: bool = False):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tokenizer = qwen_tokenizer("qwen3", small=small)
    ids = _qwen_ids(tokenizer)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=8,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=2,
        intermediate_size=32,
        **ids,
    )
    model = Qwen3ForCausalLM(config)
    _init_weights(model)
    return model, tokenizer, [ids["eos_token_id"], ids["pad_token_id"]]


def _qwen2(small: bool = False):
    """``tiny-Qwen2ForCausalLM-2.5`` (TRL's ``for_causal_lm/qwen2_for_causal_lm_2_5.py``: Qwen2.5's tokenizer)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tokenizer = qwen_tokenizer("qwen2_5", small=small)
    ids = _qwen_ids(tokenizer)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=8,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=2,
        intermediate_size=32,
        **ids,
    )
    model = Qwen2ForCausalLM(config)
    _init_weights(model)
    return model, tokenizer, [ids["eos_token_id"], ids["pad_token_id"]]


def _qwen2_reward_model(small: bool = False):
    from transformers import Qwen2Config, Qwen2ForSequenceClassification

    tokenizer = qwen_tokenizer("qwen2_5", small=small)
    ids = _qwen_ids(tokenizer)
    config = Qwen2Config(
        vocab_size=len(tokenizer) if small else 152064,
        num_labels=1,
        hidden_size=16,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=2,
        intermediate_size=32,
        pad_token_id=ids["pad_token_id"],
        eos_token_id=ids["eos_token_id"],
    )
    model = Qwen2ForSequenceClassification(config)
    _init_weights(model)
    return model, tokenizer, None


def _qwen3_reward_model(small: bool = False):
    """``tiny-Qwen3ForSequenceClassification`` (TRL's ``for_sequence_classification/qwen3...``: Qwen3's tokenizer)."""
    from transformers import Qwen3Config, Qwen3ForSequenceClassification

    tokenizer = qwen_tokenizer("qwen3", small=small)
    ids = _qwen_ids(tokenizer)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        num_labels=1,
        hidden_size=16,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=2,
        intermediate_size=32,
        pad_token_id=ids["pad_token_id"],
        eos_token_id=ids["eos_token_id"],
    )
    model = Qwen3ForSequenceClassification(config)
    _init_weights(model)
    return model, tokenizer, None


def _gemma3():
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration, Gemma3ImageProcessor, Gemma3Processor

    specials = ["<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>"]
    images = ["<start_of_image>", "<end_of_image>", "<image_soft_token>"]
    tokenizer = small_tokenizer(
        specials + images,
        "gemma3",
        pad_token="<pad>",
        eos_token="<eos>",
        bos_token="<bos>",
        extra_special_tokens={"boi_token": images[0], "eoi_token": images[1], "image_token": images[2]},
    )
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in specials + images}
    # 56x56 images in 14x14 patches: 16 patches, pooled to 4 tokens per image (the real one: 896 -> 256)
    config = Gemma3Config(
        text_config=dict(
            vocab_size=len(tokenizer),
            num_hidden_layers=2,
            hidden_size=16,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=8,
            intermediate_size=32,
            pad_token_id=ids["<pad>"],
            bos_token_id=ids["<bos>"],
            eos_token_id=ids["<eos>"],
        ),
        vision_config=dict(
            num_hidden_layers=2,
            hidden_size=16,
            num_attention_heads=4,
            intermediate_size=32,
            image_size=56,
            patch_size=14,
            vision_use_head=False,  # as google/gemma-3-4b-it: SigLIP without its pooling head
        ),
        mm_tokens_per_image=4,
        boi_token_index=ids["<start_of_image>"],
        eoi_token_index=ids["<end_of_image>"],
        image_token_index=ids["<image_soft_token>"],
    )
    model = Gemma3ForConditionalGeneration(config)
    image_processor = Gemma3ImageProcessor(size={"height": 56, "width": 56})
    processor = Gemma3Processor(
        image_processor=image_processor, tokenizer=tokenizer, chat_template=tokenizer.chat_template, image_seq_length=4
    )
    return model, processor, [ids["<eos>"], ids["<end_of_turn>"]]


def _llava_next():
    from transformers import (
        LlavaNextConfig,
        LlavaNextForConditionalGeneration,
        LlavaNextImageProcessor,
        LlavaNextProcessor,
    )

    tokenizer = small_tokenizer(
        ["<unk>", "<s>", "</s>", "<image>"], "llava_next", unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )
    tokenizer.pad_token = "<unk>"
    image_token = tokenizer.convert_tokens_to_ids("<image>")
    # 28x28 tiles in 14x14 patches (4 patches + CLS per tile); any-resolution grids of up to 2x2 tiles
    pinpoints = [[28, 56], [56, 28], [56, 56]]
    config = LlavaNextConfig(
        text_config=dict(
            model_type="mistral",
            vocab_size=len(tokenizer),
            num_hidden_layers=2,
            hidden_size=16,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=32,
            pad_token_id=tokenizer.pad_token_id,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
        ),
        vision_config=dict(
            model_type="clip_vision_model",
            num_hidden_layers=2,
            hidden_size=16,
            num_attention_heads=4,
            intermediate_size=32,
            image_size=28,
            patch_size=14,
            projection_dim=16,
        ),
        image_token_index=image_token,
        image_grid_pinpoints=pinpoints,
        vision_feature_layer=-2,
        vision_feature_select_strategy="default",
    )
    model = LlavaNextForConditionalGeneration(config)
    image_processor = LlavaNextImageProcessor(
        size={"shortest_edge": 28}, crop_size={"height": 28, "width": 28}, image_grid_pinpoints=pinpoints
    )
    processor = LlavaNextProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=14,
        vision_feature_select_strategy="default",
        chat_template=tokenizer.chat_template,
        num_additional_image_tokens=1,
    )
    return model, processor, [tokenizer.eos_token_id]


def _qwen_vl(version: str):
    from transformers import Qwen2VLImageProcessor

    if version == "2":
        from transformers import Qwen2VLConfig as Config
        from transformers import Qwen2VLForConditionalGeneration as Model
        from transformers import Qwen2VLProcessor as Processor

        vision = dict(depth=2, embed_dim=64, hidden_size=16, num_heads=4)
    else:
        from transformers import Qwen2_5_VLConfig as Config
        from transformers import Qwen2_5_VLForConditionalGeneration as Model
        from transformers import Qwen2_5_VLProcessor as Processor

        vision = dict(depth=2, hidden_size=16, num_heads=4, intermediate_size=32, out_hidden_size=16)
        vision["fullatt_block_indexes"] = [1]
    tokenizer = qwen_tokenizer("qwen2_5_vl")
    rope = {"type": "default", "mrope_section": [1, 1], "rope_type": "default"}
    config = Config(
        text_config=dict(
            vocab_size=151936,
            num_hidden_layers=2,
            hidden_size=16,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=32,
            rope_scaling=rope,
            rope_parameters=dict(rope, rope_theta=1000000.0),
            pad_token_id=151643,
            eos_token_id=151645,
            bos_token_id=151643,
        ),
        vision_config=vision,
        image_token_id=151655,
        video_token_id=151656,
        vision_start_token_id=151652,
        vision_end_token_id=151653,
    )
    model = Model(config)
    # images of 32-64 pixels resized to at most 56x56: 4 to 16 patches, 1 to 4 tokens after the 2x2 merge
    image_processor = Qwen2VLImageProcessor(min_pixels=28 * 28, max_pixels=56 * 56)
    processor = Processor(image_processor=image_processor, tokenizer=tokenizer, chat_template=tokenizer.chat_template)
    return model, processor, [151645, 151643]


BUILDERS = {
    "trl-internal-testing/tiny-Qwen3MoeForCausalLM": _qwen3_moe,
    "trl-internal-testing/tiny-Qwen3ForCausalLM": _qwen3,
    "trl-internal-testing/tiny-Qwen2ForCausalLM-2.5": _qwen2,
    "trl-internal-testing/tiny-Qwen2ForSequenceClassification-2.5": _qwen2_reward_model,
    "trl-internal-testing/tiny-Qwen3ForSequenceClassification": _qwen3_reward_model,
    "trl-ext/tiny-Qwen3ForCausalLM-small-vocab": lambda: _qwen3(small=True),
    "trl-internal-testing/tiny-Gemma3ForConditionalGeneration": _gemma3,
    "trl-internal-testing/tiny-LlavaNextForConditionalGeneration": _llava_next,
    "trl-internal-testing/tiny-Qwen2VLForConditionalGeneration": lambda: _qwen_vl("2"),
    "trl-internal-testing/tiny-Qwen2_5_VLForConditionalGeneration": lambda: _qwen_vl("2.5"),
}


#: The text stand-ins with Qwen's tokens and template in a vocabulary of about 2,000 instead of 152k (``build(...,
#: small_vocab=True)``): for tests that hard-code no Qwen token id, where a 152k-wide output layer dominates a CPU step.
SMALL_VOCAB_BUILDERS = {
    "trl-internal-testing/tiny-Qwen3MoeForCausalLM": lambda: _qwen3_moe(small=True),
    "trl-internal-testing/tiny-Qwen3ForCausalLM": lambda: _qwen3(small=True),
    "trl-internal-testing/tiny-Qwen2ForCausalLM-2.5": lambda: _qwen2(small=True),
    "trl-internal-testing/tiny-Qwen2ForSequenceClassification-2.5": lambda: _qwen2_reward_model(small=True),
    "trl-internal-testing/tiny-Qwen3ForSequenceClassification": lambda: _qwen3_reward_model(small=True),
}


def build(model_id: str, root: Path, small_vocab: bool = False) -> str:
    """The stand-in for ``model_id`` saved under ``root`` (built once per folder); the local path to load it from.
    ``small_vocab``: the small-vocabulary variant where ``SMALL_VOCAB_BUILDERS`` has one (the caller keeps the two
    variants in different folders)."""
    from transformers import GenerationConfig

    path = root / model_id.split("/")[-1]
    if (path / "done").exists():
        return str(path)
    torch.manual_seed(0)
    builders = SMALL_VOCAB_BUILDERS if small_vocab and model_id in SMALL_VOCAB_BUILDERS else BUILDERS
    model, processing_class, eos = builders[model_id]()
    model.save_pretrained(path)
    processing_class.save_pretrained(path)
    if eos is not None:
        tokenizer = getattr(processing_class, "tokenizer", processing_class)
        GenerationConfig(eos_token_id=eos, pad_token_id=tokenizer.pad_token_id).save_pretrained(path)
    (path / "done").write_text(model_id)
    return str(path)


# ---------------------------------------------------------------------------------------------------------------------
# Datasets: TRL's scripts/generate_zen_*dataset.py, seeded, with fewer rows so that a 3-epoch run stays short

ZEN_QUESTIONS = [
    "What is better than ugly?",
    "What is better than implicit?",
    "What is better than complex?",
    "What is better than complicated?",
    "What is better than nested?",
    "What is better than dense?",
    "What counts?",
    "Are special cases enough to break the rules?",
    "What beats purity?",
    "What should never pass silently?",
    "When can errors pass silently?",
    "What should you do in the face of ambiguity?",
    "How many ways should there be to do it?",
    "For whom may the way not be obvious at first?",
    "What is better than never?",
    "Is never better than *right* now?",
    "What does it mean if the implementation is hard to explain?",
    "What does it mean if the implementation is easy to explain?",
    "Any great ideas?",
]
MESSAGE = [{"content": Value("string"), "role": Value("string")}]
#: ``trl-internal-testing/zen``, config ``standard_prompt_only`` (TRL's ``scripts/generate_zen_dataset.py``)
ZEN_STANDARD_PROMPTS = [
    "Beautiful is better than",
    "Explicit is",
    "Simple is better",
    "Complex",
    "Flat is better than",
    "Sparse is better",
    "Readability",
    "Special cases aren't special",
    "Although practicality beats",
    "Errors should never",
    "Unless explicitly",
    "In the face of ambiguity, refuse",
    "There should be one-- and preferably",
    "Although that way may not be obvious at first unless you're",
    "Now is",
    "Although never is often",
    "If the implementation is hard to explain,",
    "If the implementation is easy",
    "Namespaces are one honking great",
]


def zen_standard_prompt_only(rows: int) -> Dataset:
    """``trl-internal-testing/zen``, config ``standard_prompt_only``, split ``train`` (its first ``rows``)."""
    return Dataset.from_dict({"prompt": ZEN_STANDARD_PROMPTS[:rows]})


def zen_conversational_prompt_only(rows: int) -> Dataset:
    """``trl-internal-testing/zen``, config ``conversational_prompt_only``, split ``train`` (its first ``rows``)."""
    return Dataset.from_dict({"prompt": [[{"role": "user", "content": q}] for q in ZEN_QUESTIONS[:rows]]})


def zen_image(rows: int) -> Dataset:
    """``trl-internal-testing/zen-image``, ``conversational_prompt_only``, ``train``: one random 32-64 px image each."""
    rng = np.random.default_rng(0)
    sizes = rng.integers(32, 64, size=(rows, 2))
    data = {
        "prompt": [[{"role": "user", "content": q}] for q in ZEN_QUESTIONS[:rows]],
        "image": [rng.uniform(0.0, 255.0, size=(h, w, 3)).astype(np.uint8) for h, w in sizes],
    }
    return Dataset.from_dict(data, features=Features(prompt=MESSAGE, image=Image()))


#: Where the images sit in each prompt of ``trl-internal-testing/zen-multi-image`` (its first rows).
MULTI_IMAGE = [
    ["image", "What is better than ugly?"],
    ["What is better than implicit?", "image"],
    ["image", "What is better than complex?", "image"],
    ["image", "image", "What is better than complicated?"],
    ["image", "What is better than nested?"],
    ["What is better than dense?", "image"],
]


def zen_multi_image(rows: int) -> Dataset:
    rng = np.random.default_rng(0)
    prompts, images = [], []
    for parts in MULTI_IMAGE[:rows]:
        content = [{"type": "image"} if p == "image" else {"type": "text", "text": p} for p in parts]
        prompts.append([{"role": "user", "content": content}])
        sizes = rng.integers(32, 64, size=(parts.count("image"), 2))
        images.append([rng.uniform(0.0, 255.0, size=(h, w, 3)).astype(np.uint8) for h, w in sizes])
    part = {"type": Value("string"), "text": Value("string")}
    features = Features(prompt=[{"role": Value("string"), "content": List(part)}], images=List(Image()))
    return Dataset.from_dict({"prompt": prompts, "images": images}, features=features)


def describe(path: str) -> str:
    return json.loads((Path(path) / "config.json").read_text())["architectures"][0]
