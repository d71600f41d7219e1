"""`BulkEncoder` (tokenization/bulk.py): a corpus's token ids and word starts, exactly the tokenizer's own, by
pieces for pipelines that split at spaces and text by text for the others."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from modeling_minibert.training.pretraining.corpus import load_bbc_news, split_sentences
from tokenization import train_tokenizer
from tokenization.bulk import BulkEncoder, id_dtype, splits_at_spaces


@pytest.fixture(scope="module")
def sentences() -> list[str]:
    return [s for doc in load_bbc_news()[::40] for s in split_sentences(doc)]


@pytest.fixture(scope="module")
def wordpiece(sentences):
    return train_tokenizer(train_data=sentences, vocab_size=900, disable_tqdm=True)


@pytest.fixture(scope="module")
def byte_level(sentences) -> Tokenizer:
    """A GPT-2-style tokenizer: its pieces keep their spaces ("Ġword"), so it cannot be encoded by pieces."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(
        sentences,
        trainers.BpeTrainer(vocab_size=500, show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()),
    )
    return tokenizer


def own_encoding(backend: Tokenizer, texts: list[str]) -> tuple[list[int], list[int], list[int]]:
    ids, starts, lengths = [], [], []
    for encoding in backend.encode_batch(texts, add_special_tokens=False):
        words = encoding.word_ids
        ids += encoding.ids
        starts += [int(i == 0 or w != words[i - 1]) for i, w in enumerate(words)]
        lengths.append(len(encoding.ids))
    return ids, starts, lengths


def assert_encodes_as_the_tokenizer(encoder: BulkEncoder, backend: Tokenizer, texts: list[str]) -> None:
    ids, starts, lengths = encoder.encode(texts)
    expected = own_encoding(backend, texts)
    assert (ids.tolist(), starts.tolist(), lengths.tolist()) == expected


def test_bert_wordpiece_is_encoded_by_pieces_exactly(wordpiece, sentences):
    encoder = BulkEncoder(wordpiece)
    assert encoder.by_pieces and encoder.dtype == np.uint16
    assert_encodes_as_the_tokenizer(encoder, wordpiece.backend_tokenizer, sentences)
    assert_encodes_as_the_tokenizer(encoder, wordpiece.backend_tokenizer, sentences)  # again, from the cache
    assert len(encoder.cache) > 1000


TRICKY = st.text(
    st.sampled_from(list("ab cDÉé\u0301\u00a0\t\n\u3000漢字,.'-[MASK]\x00\x1c\u200b\ufeffﬁ ")), max_size=40
)


@settings(max_examples=300, deadline=None)
@given(st.lists(TRICKY, min_size=1, max_size=8))
def test_any_text_is_encoded_as_the_tokenizer_encodes_it(wordpiece, texts):
    """Spaces of every kind, control and zero-width characters, combining accents, CJK, an added token's text."""
    assert_encodes_as_the_tokenizer(BulkEncoder(wordpiece), wordpiece.backend_tokenizer, texts)


def test_a_pipeline_that_keeps_spaces_is_encoded_text_by_text(byte_level, sentences):
    encoder = BulkEncoder(byte_level)
    assert not encoder.by_pieces
    assert_encodes_as_the_tokenizer(encoder, byte_level, sentences[:300])


def test_which_pipelines_split_at_spaces():
    bert = {
        "normalizer": {"type": "BertNormalizer"},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "added_tokens": [],
    }
    assert splits_at_spaces(bert)
    assert splits_at_spaces(
        {
            **bert,
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"}, {"type": "Digits"}]},
        }
    )
    assert not splits_at_spaces({**bert, "pre_tokenizer": {"type": "Metaspace"}})
    assert not splits_at_spaces({**bert, "pre_tokenizer": None})
    assert not splits_at_spaces({**bert, "normalizer": {"type": "Replace"}})
    assert not splits_at_spaces({**bert, "added_tokens": [{"content": "<mask>", "lstrip": True}]})


def test_a_full_cache_starts_again_and_stays_exact(wordpiece, sentences):
    encoder = BulkEncoder(wordpiece, cache_limit=50)
    for start in range(0, 400, 100):
        assert_encodes_as_the_tokenizer(encoder, wordpiece.backend_tokenizer, sentences[start : start + 100])
    assert len(encoder.cache) < 2000


def test_ids_take_the_smallest_dtype():
    assert id_dtype(8192) == np.uint16 and id_dtype(65_536) == np.uint16 and id_dtype(65_537) == np.uint32
