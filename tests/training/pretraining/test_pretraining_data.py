"""The run's batches and their masks (modeling_minibert/training/pretraining/data.py): BERT's 15% masking with
80/10/10 replacement (whole words on request), drawn again each epoch and reproducible, over batches gathered
from the prepared corpus."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from fixtures.nsp import MAX_LENGTH, dataset, docs, tokenizer  # noqa: F401 (fixtures)

from modeling_minibert.training.pretraining.data import (
    DataCollatorForPreTraining,
    RunBatches,
    RunExamples,
)


def collate_all(collator, dataset, batch_size=64, limit=None):
    n = len(dataset) if limit is None else limit
    return [(k, collator(dataset.__getitems__(range(k, min(k + batch_size, n))))) for k in range(0, n, batch_size)]


def test_masking_is_15_percent_then_80_10_10(dataset, tokenizer):
    collator = DataCollatorForPreTraining(tokenizer, seed=0)
    selected = mask = random = kept = candidates = 0
    for start, batch in collate_all(collator, dataset):
        plain = dataset.__getitems__(range(start, min(start + 64, len(dataset))))
        originals = torch.from_numpy(plain["input_ids"])
        special = torch.isin(originals, torch.tensor(tokenizer.all_special_ids))
        chosen = batch["labels"] != -100
        assert not (chosen & special).any(), "special tokens and padding are never masked"
        assert torch.equal(batch["labels"][chosen], originals[chosen])
        assert torch.equal(batch["input_ids"][~chosen], originals[~chosen])
        assert torch.equal(batch["attention_mask"], (originals != tokenizer.pad_token_id).long())
        assert torch.equal(batch["token_type_ids"], torch.from_numpy(plain["token_type_ids"]))
        assert torch.equal(batch["next_sentence_label"], torch.from_numpy(plain["next_sentence_label"]))
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
    examples = dataset.__getitems__(range(32))
    collator = DataCollatorForPreTraining(tokenizer, seed=0)
    first = collator(examples)["labels"]
    assert torch.equal(collator(examples)["labels"], first)  # a function of (seed, epoch, batch), not of history
    collator.epoch = 1
    assert not torch.equal(collator(examples)["labels"], first)  # dynamic masking
    collator.epoch = 0
    assert torch.equal(collator(examples)["labels"], first)
    assert not torch.equal(DataCollatorForPreTraining(tokenizer, seed=1)(examples)["labels"], first)
    # The examples' dicts of lists, padded by the collator, mask as the gathered batch.
    assert torch.equal(collator([dataset[i] for i in range(32)])["labels"], first)


def test_whole_word_masking_masks_every_piece_of_a_word(dataset, tokenizer):
    collator = DataCollatorForPreTraining(tokenizer, whole_word_mask=True, seed=0)
    words = masked_words = 0
    for start, batch in collate_all(collator, dataset, limit=1024):
        chosen = (batch["labels"] != -100).tolist()
        for row in range(len(chosen)):
            example = dataset[start + row]
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
        # As transformers' whole-word masking: [MASK] only.
        assert (batch["input_ids"][batch["labels"] != -100] == tokenizer.mask_token_id).all()
    assert masked_words / words == pytest.approx(0.15, abs=0.015)


def test_collator_rejects_a_bad_probability(tokenizer):
    with pytest.raises(ValueError, match=r"mlm_probability=1.5 must be between 0 and 1"):
        DataCollatorForPreTraining(tokenizer, mlm_probability=1.5)
    # 1 would leave no unmasked context to predict from: the bound is exclusive.
    with pytest.raises(ValueError, match=r"^mlm_probability=1 must be between 0 and 1 \(exclusive\)$"):
        DataCollatorForPreTraining(tokenizer, mlm_probability=1)


def test_unknown_tokens_are_masked_like_any_word(tokenizer):
    # Only [CLS], [SEP] and padding are kept from masking (the examples' special_tokens_mask), as in BERT; a mask
    # derived from the tokenizer's special tokens would also spare [UNK], which rare words become.
    unk, cls, sep = tokenizer.unk_token_id, tokenizer.cls_token_id, tokenizer.sep_token_id
    examples = [
        {
            "input_ids": [cls, unk, unk, sep, unk, unk, sep],
            "token_type_ids": [0, 0, 0, 0, 1, 1, 1],
            "special_tokens_mask": [1, 0, 0, 1, 0, 0, 1],
            "word_starts": [0, 1, 1, 0, 1, 1, 0],
            "next_sentence_label": 0,
            "example_id": i,
        }
        for i in range(32)
    ]
    labels = DataCollatorForPreTraining(tokenizer, mlm_probability=0.5, seed=0)(examples)["labels"]
    assert (labels[:, [0, 3, 6]] == -100).all()
    assert (labels[:, [1, 2, 4, 5]] == unk).sum() > 0.3 * 4 * 32


def test_a_masking_rate_schedule_follows_the_batch_number_each_batch_carries(dataset, tokenizer):
    collator = DataCollatorForPreTraining(tokenizer, mlm_probability=0.4, final_mlm_probability=0.1, seed=0)
    sampler = RunBatches(len(dataset), 64, seed=0, of=101)
    loader = RunExamples(dataset)
    rates = []
    for batch_number in (0, 50, 100):
        run_batch = next(iter(RunBatches(len(dataset), 64, seed=0, start=batch_number, of=101)))
        batch = collator(loader[run_batch])
        chosen = (batch["labels"] != -100).sum().item()
        rates.append(chosen / (batch["attention_mask"].sum().item() - 3 * 64))
    assert rates == pytest.approx([0.4, 0.25, 0.1], abs=0.03)
    assert collator.rate(50, 101) == pytest.approx(0.25) and next(iter(sampler)).of == 101


def test_a_run_batch_carries_its_epoch_and_number(dataset):
    run_batch = next(iter(RunBatches(len(dataset), 16, seed=3, start=len(dataset) // 16 + 2, of=9)))
    batch = RunExamples(dataset)[run_batch]
    assert (batch["epoch"], batch["batch_number"], batch["batches"]) == (1, len(dataset) // 16 + 2, 9)
    assert batch["example_id"].tolist() == run_batch.indices and np.asarray(batch["input_ids"]).shape[0] == 16
