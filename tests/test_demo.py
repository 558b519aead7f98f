"""The demo model and tokenizer built in code: their size as the docs state it, and the warning for text the
character tokenizer cannot read."""

from __future__ import annotations

import json
import logging
import os

import pytest

from trl_ext.demo import build_model, build_tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_demo_model_has_the_parameter_count_the_docs_state():
    """Embeddings tied to the head: 18 x 128; per layer q 128x128+128, k and v 128x64+64 each, o 128x128, MLP
    3 x 128x384, two norms 2 x 128; a final norm 128."""
    layer = (128 * 128 + 128) + 2 * (128 * 64 + 64) + 128 * 128 + 3 * 128 * 384 + 2 * 128
    expected = 18 * 128 + 3 * layer + 128
    model = build_model(build_tokenizer())
    assert sum(p.numel() for p in model.parameters()) == expected == 593_792
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    nbformat = pytest.importorskip("nbformat")
    notebook = nbformat.read(os.path.join(ROOT, "notebooks", "quickstart.ipynb"), as_version=4)
    intro = notebook.cells[0].source
    for text in (readme, intro):
        assert "0.6M-parameter" in text and "0.8M" not in text


def test_text_outside_the_vocabulary_is_warned_about_once_per_character(caplog):
    tokenizer = build_tokenizer()
    with caplog.at_level(logging.WARNING, logger="trl_ext.demo"):
        ids = tokenizer("What is 3 + 4?")["input_ids"]
        tokenizer(["What is 3 + 4?", "17+25="])  # nothing new
        tokenizer.encode("Why?")  # only 'y' is new
    assert ids.count(tokenizer.unk_token_id) == 7  # W h a t i s ?
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2, messages
    assert "no token for 7 character(s) of this text: '?', 'W', 'a', 'h', 'i', 's', 't'" in messages[0]
    assert "'What is 3 + 4?' reads as '  3 + 4'" in messages[0]
    assert "for text, use a real tokenizer" in messages[0]
    assert "no token for 1 character(s) of this text: 'y'" in messages[1]


def test_the_demo_s_own_text_is_not_warned_about(caplog):
    tokenizer = build_tokenizer()
    with caplog.at_level(logging.WARNING, logger="trl_ext.demo"):
        tokenizer(["17+25=", "3*4-2= 10"], text_target=["42<eos>", "10"])  # special tokens are in the vocabulary
        tokenizer.encode("<pad><pad>1+1=")
    assert caplog.records == []


def test_a_saved_demo_tokenizer_loads_with_auto_tokenizer(tmp_path):
    from transformers import AutoTokenizer

    build_tokenizer().save_pretrained(tmp_path)
    with open(tmp_path / "tokenizer_config.json") as f:
        assert json.load(f)["tokenizer_class"] != "CharTokenizer"
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert loaded("17+25=")["input_ids"] == build_tokenizer()("17+25=")["input_ids"] == [4, 10, 13, 5, 8, 16]


@pytest.mark.parametrize("text", [None, 12, [["1", "+"]]])
def test_inputs_that_are_not_text_pass_through(text):
    assert build_tokenizer().warn_dropped(text) == set()
