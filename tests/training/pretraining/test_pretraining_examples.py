"""NSP examples from a prepared corpus's offsets (modeling_minibert/training/pretraining/examples.py): BERT's
sentence pairs, true and balanced, trimmed as BERT trims them, the held-out documents kept apart, deterministic,
new pairs with each dupe-factor pass, and an index built once and read again."""

from __future__ import annotations

import numpy as np
import pytest
from fixtures.nsp import MAX_LENGTH, dataset, docs, tokenizer  # noqa: F401 (fixtures)
from scipy import stats

from modeling_minibert.training.pretraining.corpus import Texts, split_document_ids
from modeling_minibert.training.pretraining.data import build_nsp_dataset, run_data
from modeling_minibert.training.pretraining.examples import IS_NEXT, RANDOM_NEXT, example_index
from modeling_minibert.training.pretraining.preparation import in_memory_corpus, prepare_corpus


@pytest.fixture(scope="module")
def corpus(docs, tokenizer):
    return in_memory_corpus(Texts(docs), tokenizer)


class TokenStreams:
    """Each document's tokens as one stream, indexed by 8-grams: where does a segment of 8+ tokens occur?"""

    N = 8

    def __init__(self, corpus, documents):
        s, d = corpus.sentences, corpus.documents
        self.streams = {k: corpus.tokens[s[d[k]] : s[d[k + 1]]].tolist() for k in documents}
        self.index: dict[tuple, list] = {}
        for k, stream in self.streams.items():
            for i in range(len(stream) - self.N + 1):
                self.index.setdefault(tuple(stream[i : i + self.N]), []).append((k, i))

    def find(self, segment: list[int]) -> list[tuple[int, int]]:
        """(document, position) of every occurrence of `segment` (at least N tokens long)."""
        assert len(segment) >= self.N
        return [
            (k, i)
            for k, i in self.index.get(tuple(segment[: self.N]), [])
            if self.streams[k][i : i + len(segment)] == segment
        ]


def segments(example: dict, sep: int) -> tuple[list[int], list[int]]:
    ids = example["input_ids"]
    cut = ids.index(sep)
    return ids[1:cut], ids[cut + 1 : -1]


def test_examples_are_bert_sentence_pairs(dataset, tokenizer):
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    lengths = []
    for i in range(len(dataset)):
        ex = dataset[i]
        ids = ex["input_ids"]
        lengths.append(len(ids))
        assert len(ids) <= MAX_LENGTH
        assert ids[0] == cls and ids[-1] == sep and ids.count(sep) == 2 and ids.count(cls) == 1
        first_sep = ids.index(sep)
        assert first_sep >= 2 and first_sep <= len(ids) - 3  # both segments non-empty
        assert ex["token_type_ids"] == [0] * (first_sep + 1) + [1] * (len(ids) - first_sep - 1)
        assert ex["special_tokens_mask"] == [int(i in (0, first_sep, len(ids) - 1)) for i in range(len(ids))]
        assert len(ex["word_starts"]) == len(ids) and ex["example_id"] == i
    # Segments are filled up to the maximum length (only a document's last pair may fall short).
    assert np.median(lengths) == MAX_LENGTH


def test_a_batch_is_its_examples_padded(dataset, tokenizer):
    rows = [dataset[i] for i in (5, 0, 77, 3)]
    batch = dataset.__getitems__([5, 0, 77, 3])
    length = max(len(r["input_ids"]) for r in rows)
    assert batch["input_ids"].shape == (4, length)
    for row, example in zip(range(4), rows):
        n = len(example["input_ids"])
        for name in ("input_ids", "token_type_ids", "special_tokens_mask", "word_starts"):
            assert batch[name][row, :n].tolist() == example[name]
        assert batch["input_ids"][row, n:].tolist() == [tokenizer.pad_token_id] * (length - n)
        assert batch["attention_mask"][row].tolist() == [1] * n + [0] * (length - n)
    assert batch["example_id"].tolist() == [5, 0, 77, 3]


def test_nsp_labels_are_balanced_and_true(corpus, dataset, tokenizer):
    labels = np.array([dataset[i]["next_sentence_label"] for i in range(len(dataset))])
    assert len(dataset) > 2000
    assert abs(labels.mean() - 0.5) < 4 * np.sqrt(0.25 / len(dataset))  # 50/50 within 4 sigma
    assert_pairs_are_true(dataset, TokenStreams(corpus, range(corpus.num_documents)), tokenizer.sep_token_id)


def test_without_nsp_every_example_is_text_of_one_document(corpus, docs, tokenizer):
    """random_next=0 (the objectives without NSP): every B continues its A's document."""
    windows = build_nsp_dataset(docs, tokenizer, max_length=MAX_LENGTH, seed=0, random_next=0.0)
    assert len(windows) > 2000 and {windows[i]["next_sentence_label"] for i in range(len(windows))} == {IS_NEXT}
    assert_pairs_are_true(windows, TokenStreams(corpus, range(corpus.num_documents)), tokenizer.sep_token_id)


def assert_pairs_are_true(examples, text: TokenStreams, sep: int) -> None:
    """IsNext: B comes after A in A's document; random: B is from another document (for the pairs that can be
    traced to one document: more than 80% of them)."""
    checked = 0
    for k in range(len(examples)):
        example = examples[k]
        a, b = segments(example, sep)
        if len(a) < 8 or len(b) < 8:
            continue  # short segments ("however ,") occur in many documents: nothing to learn from them
        homes = {d for d, _ in text.find(a)}
        assert homes, "segment A is text of the corpus"
        if len(homes) > 1:
            continue  # a passage quoted in two articles: its pair cannot be traced to one document
        home = homes.pop()
        a_at = min(i for d, i in text.find(a) if d == home)
        b_places = text.find(b)
        assert b_places, "B is text of the corpus"
        if example["next_sentence_label"] == RANDOM_NEXT and len({d for d, _ in b_places}) > 1:
            continue  # a passage two articles share (a team list): its random B cannot be traced to one
        if example["next_sentence_label"] == IS_NEXT:
            assert any(d == home and i >= a_at + len(a) for d, i in b_places), (
                "IsNext: B comes after A in A's document"
            )
        else:
            assert example["next_sentence_label"] == RANDOM_NEXT
            assert all(d != home for d, _ in b_places), "random: B is from another document"
        checked += 1
    assert checked > 0.8 * len(examples)


def test_no_held_out_document_reaches_the_training_examples(docs, tokenizer, tmp_path):
    data = run_data(
        Texts(docs),
        tokenizer,
        MAX_LENGTH,
        seed=0,
        dupe_factor=2,
        held_out_fraction=0.2,
        cache_dir=tmp_path,
        num_workers=1,
        show_progress=False,
    )
    assert len(data.held_out_ids) == round(0.2 * len(docs))
    sample = run_data(
        Texts(docs),
        tokenizer,
        MAX_LENGTH,
        seed=0,
        dupe_factor=2,
        held_out_fraction=0.2,
        cache_dir=tmp_path,
        show_progress=False,
        max_eval_samples=100,
    ).eval_set
    assert len(sample) == 100 and set(sample.index.tolist()) < set(data.eval_set.index.tolist())
    held_out_text = TokenStreams(data.corpus, data.held_out_ids.tolist())
    train_text = TokenStreams(data.corpus, data.train_ids.tolist())
    sep = tokenizer.sep_token_id
    for examples, own, other in (
        (data.eval_set, held_out_text, train_text),
        (data.train_set, train_text, held_out_text),
    ):
        for k in range(len(examples)):
            for segment in segments(examples[k], sep):
                if len(segment) >= 12:  # long enough to be unique text
                    assert own.find(segment) and not other.find(segment)


def test_examples_are_deterministic(docs, tokenizer, dataset):
    again = build_nsp_dataset(docs, tokenizer, max_length=MAX_LENGTH, seed=0)
    assert np.array_equal(again.index, dataset.index)
    other = build_nsp_dataset(docs, tokenizer, max_length=MAX_LENGTH, seed=1)
    assert len(other) != len(dataset) or not np.array_equal(other.index, dataset.index)
    with pytest.raises(ValueError, match=r"max_length=5 is too short"):
        build_nsp_dataset(docs, tokenizer, max_length=5)
    with pytest.raises(ValueError, match=r"dupe_factor=0 must be at least 1"):
        build_nsp_dataset(docs, tokenizer, dupe_factor=0)
    with pytest.raises(ValueError, match=r"NSP needs at least 2 non-empty documents, got 1"):
        build_nsp_dataset(docs[:1], tokenizer)


def test_dupe_factor_passes_again_with_new_pairs(docs, tokenizer, dataset):
    doubled = build_nsp_dataset(docs, tokenizer, max_length=MAX_LENGTH, seed=0, dupe_factor=2)
    first = len(dataset)
    assert np.array_equal(doubled.index[:first], dataset.index)  # the first pass is the dupe_factor=1 set
    second = doubled.index[first:]
    assert abs(len(second) - first) < 0.1 * first
    shared = set(map(tuple, second[["a_start", "b_start"]].tolist())) & set(
        map(tuple, dataset.index[["a_start", "b_start"]].tolist())
    )
    assert len(shared) < 0.05 * first  # new pairs
    assert [doubled[i]["example_id"] for i in (0, first, len(doubled) - 1)] == [0, first, len(doubled) - 1]


def bert_truncation(a: int, b: int, target: int, rng) -> tuple[int, int, int, int]:
    """BERT's `truncate_seq_pair`, token by token: (A's front, A's back, B's front, B's back) tokens removed."""
    removed = [0, 0, 0, 0]
    while a + b > target:
        if a > b:
            a -= 1
            removed[0 if rng.random() < 0.5 else 1] += 1
        else:
            b -= 1
            removed[2 if rng.random() < 0.5 else 3] += 1
    return tuple(removed)


def test_long_pairs_lose_tokens_as_bert_trims_them():
    """BERT trims the longer segment (B when they tie) a token at a time, at the front or the back with equal
    chance: the same tokens per segment, and front counts of the same distribution (Binomial(lost, 1/2))."""
    from modeling_minibert.training.pretraining.examples import _truncated

    rng = np.random.default_rng(0)
    a_length, b_length = rng.integers(1, 60, 4000), rng.integers(1, 60, 4000)
    records = _truncated(
        np.zeros(4000, np.int64),
        a_length,
        np.full(4000, 1000),
        1000 + b_length,
        np.zeros(4000, bool),
        45,
        np.random.default_rng(1),
    )
    loop = np.array([bert_truncation(a, b, 45, rng) for a, b in zip(a_length, b_length)])
    lost_a, lost_b = a_length - records["a_length"], b_length - records["b_length"]
    assert np.array_equal(lost_a, loop[:, 0] + loop[:, 1]) and np.array_equal(lost_b, loop[:, 2] + loop[:, 3])
    assert (records["a_length"] + records["b_length"] <= 45).all() and (records["a_length"] > 0).all()
    front_a, front_b = records["a_start"], records["b_start"] - 1000
    assert ((front_a <= lost_a) & (front_b <= lost_b)).all()
    for ours, theirs, lost in ((front_a, loop[:, 0], lost_a), (front_b, loop[:, 2], lost_b)):
        assert abs(ours.sum() - lost.sum() / 2) < 4 * np.sqrt(lost.sum() / 4)
        assert stats.ks_2samp(ours[lost > 0], theirs[lost > 0]).pvalue > 1e-3


def test_the_index_is_built_once_and_read_again(docs, tokenizer, tmp_path, monkeypatch):
    from modeling_minibert.training.pretraining import examples as examples_module

    prepared = prepare_corpus(Texts(docs), tokenizer, tmp_path, 1, show_progress=False)
    ids, _ = split_document_ids(prepared.num_documents, 0.1, 0)
    built = example_index(prepared, ids, MAX_LENGTH, seed=0, dupe_factor=2)
    assert isinstance(built, np.memmap) and len(list((prepared.folder / "examples").glob("*.bin"))) == 1
    monkeypatch.setattr(examples_module, "build_examples", lambda *args: pytest.fail("built again"))
    assert np.array_equal(example_index(prepared, ids, MAX_LENGTH, seed=0, dupe_factor=2), built)
