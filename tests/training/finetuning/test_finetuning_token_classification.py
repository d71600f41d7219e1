"""Token classification: the tagger learns the entities, every sub-token is trained with label_all_tokens, the
saved folder tags text in a pipeline."""

from __future__ import annotations

import json

import pytest
from datasets import Dataset
from fixtures.finetuning_checkpoint import (  # noqa: F401 (checkpoint: a fixture)
    FAST,
    NER_TRAIN,
    NER_VALIDATION,
    QUIET,
    assert_clean_output,
    checkpoint,
)
from transformers import AutoTokenizer, Trainer, pipeline

from modeling_minibert.training.finetuning import finetune
from modeling_minibert.training.finetuning.data import load_data
from modeling_minibert.training.finetuning.tasks.token_classification import align_word_labels, continuation_labels

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def ner_model(checkpoint, tmp_path_factory):
    output = tmp_path_factory.mktemp("ner") / "model"
    return finetune(
        task="token-classification",
        model_name_or_path=checkpoint,
        train_file=NER_TRAIN,
        output_dir=output,
        validation_file=NER_VALIDATION,
        num_train_epochs=5,
        **FAST,
    )


def test_token_classification_learns_the_entities_and_saves_the_best_epoch(ner_model):
    result = ner_model
    # Chance is an entity F1 near 0: guessing tags rarely gets both boundaries and the type right.
    assert result.metrics["f1"] > 0.8, result.metrics
    assert {"precision", "recall", "accuracy", "f1_PER", "f1_LOC", "f1_ORG"} <= set(result.metrics)
    assert result.labels == ["O", "B-LOC", "B-ORG", "B-PER", "I-LOC", "I-ORG"]  # fixture has no I-PER
    config = json.loads((result.output_dir / "config.json").read_text())
    assert config["id2label"] == {str(i): name for i, name in enumerate(result.labels)}
    assert config["label2id"] == {name: i for i, name in enumerate(result.labels)}
    assert config["architectures"] == ["MiniBertForTokenClassification"]
    results = json.loads((result.output_dir / "all_results.json").read_text())
    assert results["eval_f1"] == pytest.approx(result.metrics["f1"])
    # The saved model is the best evaluation's (load_best_model_at_end), its step recorded in trainer_state.json.
    state = json.loads((result.output_dir / "trainer_state.json").read_text())
    evaluations = {e["step"]: e["eval_f1"] for e in state["log_history"] if "eval_f1" in e}
    assert len(evaluations) == 5  # one per epoch
    assert evaluations[state["best_global_step"]] == max(evaluations.values())
    assert result.metrics["f1"] == pytest.approx(max(evaluations.values()))
    assert_clean_output(result.output_dir)


def test_token_classification_pipeline_finds_the_entities(ner_model):
    tagger = pipeline("token-classification", model=str(ner_model.output_dir), aggregation_strategy="simple")
    data = load_data(NER_VALIDATION, conll=True).dataset
    right = 0
    for tokens, tags in zip(data["tokens"][:20], data["tags"][:20]):
        gold = {(tag[2:], token.lower()) for token, tag in zip(tokens, tags) if tag.startswith("B-")}
        found = {(e["entity_group"], e["word"].split()[0]) for e in tagger(" ".join(tokens))}
        assert all(group in {"PER", "LOC", "ORG"} for group, _ in found)
        right += found == gold
    assert right >= 10  # most sentences get exactly their entities


def test_word_labels_go_on_first_subtokens_or_all():
    names = ["O", "B-PER", "I-PER", "B-LOC"]  # no I-LOC: a B-LOC word continues as B-LOC
    continuation = continuation_labels(names)
    assert continuation == {0: 0, 1: 2, 2: 2, 3: 3}
    word_ids = [None, 0, 0, 1, 2, 2, 2, None]  # [CLS] Ro ##sa lives Lis ##bo ##n [SEP]
    word_labels = [1, 0, 3]  # B-PER O B-LOC
    assert align_word_labels(word_ids, word_labels, None) == [-100, 1, -100, 0, 3, -100, -100, -100]
    assert align_word_labels(word_ids, word_labels, continuation) == [-100, 1, 2, 0, 3, 3, 3, -100]


@pytest.mark.parametrize("label_all_tokens", [False, True])
def test_label_all_tokens_reaches_the_batches_trainer_trains_on(checkpoint, tmp_path, monkeypatch, label_all_tokens):
    # Words the tokenizer has never seen split into several sub-tokens.
    words, tags = ["Zyxwvut", "lives", "in", "Qwertyuiop"], ["B-PER", "O", "O", "B-LOC"]
    names = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    pieces = [len(tokenizer.tokenize(w)) for w in words]
    assert pieces[0] > 1 and pieces[3] > 1
    seen = []
    compute_loss = Trainer.compute_loss

    def recording(self, model, inputs, *args, **kwargs):
        if model.training:
            seen.append(inputs["labels"].clone())
        return compute_loss(self, model, inputs, *args, **kwargs)

    monkeypatch.setattr(Trainer, "compute_loss", recording)
    data = Dataset.from_dict({"tokens": [words] * 4, "tags": [tags] * 4})
    finetune(
        task="token-classification",
        model_name_or_path=checkpoint,
        train_data=data,
        output_dir=tmp_path / "out",
        labels=names,
        label_all_tokens=label_all_tokens,
        max_steps=1,
        **QUIET,
    )
    (batch,) = seen
    ignored = [-100]  # [CLS]
    per, loc = names.index("B-PER"), names.index("B-LOC")
    if label_all_tokens:  # later sub-tokens continue the entity: B-PER -> I-PER, B-LOC -> I-LOC
        expected = (
            ignored
            + [per]
            + [names.index("I-PER")] * (pieces[0] - 1)
            + [0, 0]
            + [loc]
            + [names.index("I-LOC")] * (pieces[3] - 1)
        )
    else:
        expected = ignored + [per] + [-100] * (pieces[0] - 1) + [0, 0] + [loc] + [-100] * (pieces[3] - 1)
    expected += [-100]  # [SEP]
    assert batch.tolist() == [expected] * 4


def test_part_of_speech_tags_are_scored_by_token_accuracy_not_entities(checkpoint, tmp_path):
    rows = {"words": [["the", "cat", "sat"], ["a", "dog", "ran"]] * 10, "pos": [["DT", "NN", "VB"]] * 20}
    data = Dataset.from_dict(rows)
    result = finetune(
        task="token-classification",
        model_name_or_path=checkpoint,
        train_data=data,
        output_dir=tmp_path / "out",
        validation_data=data,
        text_column_name="words",
        label_column_name="pos",
        max_steps=2,
        **QUIET,
    )
    assert {"accuracy", "macro_f1"} <= set(result.metrics) and "precision" not in result.metrics
