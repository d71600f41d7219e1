"""Fine-tuning end to end on small data: each task trains, scores above chance, saves a folder that pipelines load.

The checkpoint is a tiny Mini-BERT with random weights and a tokenizer trained on the fixtures, saved the way
`minibert pretrain` saves (MiniBertForPreTraining + tokenizer in one folder). The NER and QA fixtures are
templated (tests/fixtures/make_finetuning_fixtures.py), so such a model learns them in seconds.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from datasets import Dataset, DatasetDict
from safetensors.torch import load_file
from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline

from modeling_minibert import MiniBertConfig, MiniBertForPreTraining
from modeling_minibert.cli import main
from modeling_minibert.finetuning import (
    CONFUSION_FILE,
    CURVES_FILE,
    PREDICTIONS_FILE,
    RESULTS_FILE,
    _max_length,
    _qa_features,
    align_word_labels,
    continuation_labels,
    finetune,
    finetune_question_answering,
    finetune_sequence_classification,
    finetune_token_classification,
    training_arguments,
)
from modeling_minibert.finetuning_data import DataError, load_data, question_answer_columns
from modeling_minibert.finetuning_metrics import squad_metrics
from modeling_minibert.question_answering_pipeline import QuestionAnsweringPipeline
from benchmarks.rotten_tomatoes import load_rotten_tomatoes, tfidf_baseline
from tokenization import train_tokenizer

from conftest import run_python

FIXTURES = Path(__file__).parent / "fixtures"
NER_TRAIN, NER_VALIDATION = FIXTURES / "ner_train.conll", FIXTURES / "ner_validation.conll"
QA_TRAIN, QA_VALIDATION = FIXTURES / "qa_train.json", FIXTURES / "qa_validation.json"
QUIET = {"disable_tqdm": True, "logging_steps": 5}
FAST = {"learning_rate": 3e-3, "per_device_train_batch_size": 32, **QUIET}  # tiny random model: large steps


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Models this small train fastest on one thread; with two, OpenMP's synchronisation costs more than the
    work, and far more when other processes compete for the cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def rotten_tomatoes_splits() -> DatasetDict:
    return load_rotten_tomatoes()


def head(splits: DatasetDict, train: int, held_out: int) -> DatasetDict:
    return DatasetDict(
        train=splits["train"].select(range(train)),
        validation=splits["validation"].select(range(held_out)),
        test=splits["test"].select(range(held_out)),
    )


@pytest.fixture(scope="module")
def rotten_tomatoes(rotten_tomatoes_splits) -> DatasetDict:
    """A small slice of the real Rotten Tomatoes split (by movie), to keep the fine-tuning test fast."""
    return head(rotten_tomatoes_splits, 480, 160)


def pair_data(n: int, seed: int) -> Dataset:
    """Sentence pairs whose label is read off the second text: proves the pair reaches the model."""
    rng = random.Random(seed)
    people, places, orgs = ["Ana", "Ben", "Carla", "Hugo"], ["Lisbon", "Paris", "Oslo"], ["Acme", "Globex", "Hooli"]
    rows = {"question": [], "fact": [], "kind": []}
    for _ in range(n):
        person = rng.choice(people)
        lives = rng.random() < 0.5
        rows["question"].append(f"What do we know about {person} ?")
        rows["fact"].append(f"{person} lives in {rng.choice(places)} ." if lives else f"{person} works for {rng.choice(orgs)} .")
        rows["kind"].append("place" if lives else "company")
    return Dataset.from_dict(rows)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, rotten_tomatoes) -> Path:
    """A 'pretrained' folder as `minibert pretrain` leaves it: MiniBertForPreTraining + tokenizer."""
    ner = load_data(NER_TRAIN, conll=True).dataset[:]
    qa = load_data(QA_TRAIN).dataset[:]
    pairs = pair_data(50, seed=0)[:]
    texts = [" ".join(t) for t in ner["tokens"]] + qa["context"] + qa["question"] + pairs["question"] + pairs["fact"]
    texts += list(rotten_tomatoes["train"]["text"])
    tokenizer = train_tokenizer(texts, vocab_size=800, show_progress=False, model_max_length=64)
    config = MiniBertConfig(
        vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64,
    )
    folder = tmp_path_factory.mktemp("pretrained")
    MiniBertForPreTraining(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def saved_files(folder: Path) -> set[str]:
    return {p.name for p in folder.rglob("*") if p.is_file()}


def assert_clean_output(folder: Path) -> None:
    """Only safetensors weights, no Trainer checkpoints or pickles, no leftovers beside the folder."""
    files = saved_files(folder)
    assert {"config.json", "model.safetensors", "tokenizer.json", RESULTS_FILE, CURVES_FILE} <= files
    assert not [f for f in files if f.endswith((".bin", ".pt", ".pth", ".pkl"))]
    assert not (folder / "checkpoints").exists()
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(f".{folder.name}.")]


# ---------------------------------------------------------------------------------------------------------------
# Token classification


@pytest.fixture(scope="module")
def ner_model(checkpoint, tmp_path_factory):
    output = tmp_path_factory.mktemp("ner") / "model"
    result = finetune_token_classification(
        checkpoint, NER_TRAIN, output, validation_data=NER_VALIDATION, num_train_epochs=5, **FAST
    )
    return result


def test_token_classification_learns_the_entities(ner_model):
    result = ner_model
    # Chance is an entity F1 near 0: guessing tags rarely gets both boundaries and the type right.
    assert result.metrics["f1"] > 0.8, result.metrics
    assert {"precision", "recall", "accuracy", "f1_PER", "f1_LOC", "f1_ORG"} <= set(result.metrics)
    assert result.labels == ["O", "B-LOC", "B-ORG", "B-PER", "I-LOC", "I-ORG"]  # fixture has no I-PER
    config = json.loads((result.output_dir / "config.json").read_text())
    assert config["id2label"] == {str(i): name for i, name in enumerate(result.labels)}
    assert config["label2id"] == {name: i for i, name in enumerate(result.labels)}
    assert config["architectures"] == ["MiniBertForTokenClassification"]
    results = json.loads((result.output_dir / RESULTS_FILE).read_text())
    assert results["validation"]["f1"] == pytest.approx(result.metrics["f1"])
    # The saved model is the best evaluation's (load_best_model_at_end), its checkpoint step recorded.
    evaluations = {e["step"]: e["eval_f1"] for e in results["log_history"] if "eval_f1" in e}
    assert len(evaluations) == 5  # one per epoch
    assert evaluations[results["best_checkpoint_step"]] == max(evaluations.values())
    assert result.metrics["f1"] == pytest.approx(max(evaluations.values()))
    assert_clean_output(result.output_dir)


def test_token_classification_pipeline(ner_model):
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


def test_label_all_tokens_trains_every_subtoken(checkpoint, tmp_path):
    # Words the tokenizer has never seen split into several sub-tokens.
    data = Dataset.from_dict({"tokens": [["Zyxwvut", "lives", "in", "Qwertyuiop"]] * 8, "tags": [["B-PER", "O", "O", "B-LOC"]] * 8})
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    assert len(tokenizer.tokenize("Zyxwvut")) > 1
    result = finetune_token_classification(
        checkpoint, data, tmp_path / "out", validation_data=data, label_all_tokens=True, labels=["O", "B-PER", "I-PER", "B-LOC", "I-LOC"],
        max_steps=1, eval_strategy="no", load_best_model_at_end=False, **QUIET,
    )
    assert result.labels == ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]


def test_part_of_speech_tags_score_token_accuracy(checkpoint, tmp_path):
    rows = {"words": [["the", "cat", "sat"], ["a", "dog", "ran"]] * 10, "pos": [["DT", "NN", "VB"]] * 20}
    data = Dataset.from_dict(rows)
    result = finetune_token_classification(
        checkpoint, data, tmp_path / "out", validation_data=data, tokens_column="words", tags_column="pos", max_steps=2, **QUIET
    )
    assert {"accuracy", "macro_f1"} <= set(result.metrics) and "precision" not in result.metrics


# ---------------------------------------------------------------------------------------------------------------
# Question answering


def test_qa_windows_point_at_the_answer(checkpoint):
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    data = load_data(QA_VALIDATION)
    examples = question_answer_columns(data)
    features = _qa_features(tokenizer, data, examples, max_length=32, doc_stride=8)
    assert len(features) > len(examples.ids)  # long contexts overflow into several windows
    windows_with_answer = set()
    for feature in features:
        example = feature["example_index"]
        answer = examples.answers[example]["text"][0]
        start, end = feature["start_positions"], feature["end_positions"]
        if start == 0:
            assert end == 0  # no (whole) answer in this window: point at [CLS]
            continue
        assert feature["context_mask"][start] and feature["context_mask"][end]
        span = examples.contexts[example][feature["offset_mapping"][start][0] : feature["offset_mapping"][end][1]]
        assert span == answer
        windows_with_answer.add(example)
    assert windows_with_answer == set(range(len(examples.ids)))  # every answer fits in some window


def test_question_too_long_for_the_window(checkpoint):
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    long_question = {"question": ["Where " + "does " * 30 + "Ana live ?"], "context": ["Ana lives in Lisbon ."],
                     "answers": [{"text": ["Lisbon"], "answer_start": [13]}]}
    data = load_data(Dataset.from_dict(long_question), name="questions")
    n = len(tokenizer.tokenize(long_question["question"][0]))
    room = 32 - 3 - 8 - 1  # window - [CLS] [SEP] [SEP] - overlap - at least one new context token
    with pytest.raises(DataError, match=rf"questions, row 1, field 'question': the question is {n} tokens; with max_length=32 and doc_stride=8 it may be at most {room}"):
        _qa_features(tokenizer, data, question_answer_columns(data), max_length=32, doc_stride=8)


@pytest.fixture(scope="module")
def qa_model(checkpoint, tmp_path_factory):
    output = tmp_path_factory.mktemp("qa") / "model"
    return finetune_question_answering(
        checkpoint, QA_TRAIN, output, validation_data=QA_VALIDATION, test_data=QA_VALIDATION, max_length=32, doc_stride=8, n_best=3,
        num_train_epochs=12, **FAST,
    )


def test_question_answering_learns_the_answers(qa_model):
    # A random span of the context scores near 0; always answering with one of the context's two names (place or
    # company) would score about 0.5: above that, the model reads the question.
    assert qa_model.metrics["f1"] > 0.6, qa_model.metrics
    assert qa_model.metrics["exact_match"] > 0.55
    # The test split is scored by the same post-processing (here it is the validation file again).
    assert {k: qa_model.test_metrics[k] for k in ("exact_match", "f1")} == pytest.approx(
        {k: qa_model.metrics[k] for k in ("exact_match", "f1")})
    predictions = json.loads((qa_model.output_dir / PREDICTIONS_FILE).read_text())
    examples = question_answer_columns(load_data(QA_VALIDATION))
    assert set(predictions) == set(examples.ids)
    for qid, context in zip(examples.ids, examples.contexts):
        n_best = predictions[qid]
        assert 1 <= len(n_best) <= 3
        assert [a["score"] for a in n_best] == sorted((a["score"] for a in n_best), reverse=True)
        assert all(context[a["start"] : a["end"]] == a["answer"] for a in n_best)
    assert_clean_output(qa_model.output_dir)


def test_question_answering_pipeline_matches_evaluation(qa_model):
    qa = pipeline("question-answering", model=str(qa_model.output_dir), trust_remote_code=True)
    examples = question_answer_columns(load_data(QA_VALIDATION))
    # Same windows as evaluation -> the same answers -> the same scores.
    answers = qa(question=examples.questions, context=examples.contexts, max_seq_len=32, doc_stride=8, batch_size=8)
    predictions = {qid: a["answer"] for qid, a in zip(examples.ids, answers)}
    references = {qid: a["text"] for qid, a in zip(examples.ids, examples.answers)}
    assert squad_metrics(predictions, references) == pytest.approx({k: qa_model.metrics[k] for k in ("exact_match", "f1")})
    # With this package imported, the class can also be named directly (no remote code).
    direct = pipeline("question-answering", model=str(qa_model.output_dir), pipeline_class=QuestionAnsweringPipeline)
    one = direct(question=examples.questions[0], context=examples.contexts[0], max_seq_len=32, doc_stride=8)
    assert one == pytest.approx(answers[0])
    assert set(one) == {"score", "start", "end", "answer"}
    with pytest.raises(ValueError, match="the question is .* tokens; with max_seq_len=32"):
        direct(question="where " * 40, context="Ana lives in Lisbon .", max_seq_len=32, doc_stride=8)


# ---------------------------------------------------------------------------------------------------------------
# Sequence classification


def test_sentence_pairs_with_trainer_options(checkpoint, tmp_path):
    train, validation = pair_data(256, seed=1), pair_data(64, seed=2)
    result = finetune_sequence_classification(
        checkpoint, train, tmp_path / "pairs", validation_data=validation,
        text_column="question", text_pair_column="fact", label_column="kind",
        # Trainer options pass through: accumulation, step-wise evaluation and saving, length-grouped batches, bf16.
        gradient_accumulation_steps=2, eval_strategy="steps", eval_steps=8, group_by_length=True, bf16=True,
        per_device_train_batch_size=16, learning_rate=3e-3, num_train_epochs=4, **QUIET,
    )
    # The label is in the second text only: a model that did not see the pair would sit at chance (0.5).
    assert result.metrics["accuracy"] > 0.8, result.metrics
    results = json.loads((result.output_dir / RESULTS_FILE).read_text())
    arguments = results["training_arguments"]
    assert arguments["gradient_accumulation_steps"] == 2 and arguments["bf16"] is True
    assert arguments["train_sampling_strategy"] == "group_by_length"
    assert arguments["eval_steps"] == arguments["save_steps"] == 8
    # 256 rows / (16 x 2) = 8 optimizer steps per epoch: evaluations (and checkpoints) every 8 steps.
    evaluations = {e["step"]: e["eval_accuracy"] for e in results["log_history"] if "eval_accuracy" in e}
    assert list(evaluations) == [8, 16, 24, 32]
    assert evaluations[results["best_checkpoint_step"]] == max(evaluations.values()) == result.metrics["accuracy"]
    classifier = pipeline("text-classification", model=str(result.output_dir))
    predictions = classifier([{"text": q, "text_pair": f} for q, f in zip(validation["question"], validation["fact"])])
    accuracy = sum(p["label"] == k for p, k in zip(predictions, validation["kind"])) / len(validation)
    assert accuracy == pytest.approx(result.metrics["accuracy"])
    assert (result.output_dir / CONFUSION_FILE).stat().st_size > 0


@pytest.fixture(scope="module")
def sentiment_model(checkpoint, rotten_tomatoes, tmp_path_factory):
    return finetune(
        "sequence-classification", checkpoint, rotten_tomatoes["train"], tmp_path_factory.mktemp("rt") / "sentiment",
        validation_data=rotten_tomatoes["validation"], test_data=rotten_tomatoes["test"],
        num_train_epochs=1, **FAST,
    )


def test_rotten_tomatoes_end_to_end(sentiment_model, rotten_tomatoes):
    result = sentiment_model
    assert result.labels == ["fresh", "rotten"]
    for scores in (result.metrics, result.test_metrics):
        assert 0 <= scores["accuracy"] <= 1 and 0 <= scores["macro_f1"] <= 1
    assert_clean_output(result.output_dir)
    assert (result.output_dir / CONFUSION_FILE).exists()
    # The pipeline gives the model's own answers: its test accuracy is the one Trainer measured.
    classifier = pipeline("text-classification", model=str(result.output_dir))
    predictions = classifier(list(rotten_tomatoes["test"]["text"]), truncation=True, batch_size=32)
    assert {p["label"] for p in predictions} <= {"fresh", "rotten"}
    accuracy = sum(p["label"] == y for p, y in zip(predictions, rotten_tomatoes["test"]["label"])) / 160
    assert accuracy == pytest.approx(result.test_metrics["accuracy"])
    # Weights on disk are the best model's, stored as safetensors and reloadable.
    state = load_file(result.output_dir / "model.safetensors")
    reloaded = AutoModelForSequenceClassification.from_pretrained(result.output_dir)
    assert reloaded.config.id2label == {0: "fresh", 1: "rotten"}
    assert set(state) >= {"classifier.weight", "bert.embeddings.word_embeddings.weight"}


def test_tfidf_baseline_beats_the_majority_class(rotten_tomatoes_splits):
    splits = head(rotten_tomatoes_splits, 4000, 500)
    scores = tfidf_baseline(splits, c_values=(1.0, 4.0))
    labels = list(splits["test"]["label"])
    majority = max(labels.count(c) for c in set(labels)) / len(labels)
    assert scores["test"]["accuracy"] > majority
    assert scores["C"] in (1.0, 4.0) and set(scores["validation"]) == {"accuracy", "macro_f1"}


def test_starting_from_a_finetuned_classifier_keeps_its_label_ids(checkpoint, tmp_path):
    data = Dataset.from_dict({"text": ["good film", "bad film"] * 4, "label": ["pos", "neg"] * 4})
    first = finetune_sequence_classification(checkpoint, data, tmp_path / "a", labels=["pos", "neg"], max_steps=1, **QUIET)
    assert first.metrics == {}  # no validation data: the last model is saved
    second = finetune_sequence_classification(first.output_dir, data, tmp_path / "b", max_steps=1, **QUIET)
    assert second.labels == ["pos", "neg"]  # not re-sorted to ["neg", "pos"]


# ---------------------------------------------------------------------------------------------------------------
# Errors, options and the command line


def test_bad_validation_labels_fail_before_training(checkpoint, tmp_path):
    (tmp_path / "train.csv").write_text("text,label\ngood,pos\nbad,neg\n")
    (tmp_path / "validation.csv").write_text("text,label\nfine,pos\nmeh,neutral\n")
    with pytest.raises(DataError, match=r"validation\.csv, row 2, field 'label': label 'neutral' is not one of the labels \['neg', 'pos'\]"):
        finetune_sequence_classification(checkpoint, tmp_path / "train.csv", tmp_path / "out", validation_data=tmp_path / "validation.csv")
    assert not (tmp_path / "out").exists()


def test_answer_outside_its_context_fails(checkpoint, tmp_path):
    document = json.loads(QA_TRAIN.read_text())
    document["data"][0]["paragraphs"][1]["qas"][0]["answers"][0]["answer_start"] += 1
    (tmp_path / "qa.json").write_text(json.dumps(document))
    with pytest.raises(DataError, match=r"qa\.json, row 3 \(id 'q1-0'\), field 'answers': answer '.*' is not in the context at answer_start"):
        finetune_question_answering(checkpoint, tmp_path / "qa.json", tmp_path / "out")


def test_output_folder_is_never_half_written(checkpoint, tmp_path):
    data = Dataset.from_dict({"text": ["good", "bad"], "label": ["pos", "neg"]})
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("x")
    with pytest.raises(FileExistsError, match=r"out: folder is not empty \(pass overwrite=True / --overwrite to replace it\)"):
        finetune_sequence_classification(checkpoint, data, tmp_path / "out")
    # A failure inside the run (here a bad Trainer option) leaves the old folder as it was, and no staging folder.
    with pytest.raises(ValueError, match=r"unknown training option\(s\) \['not_an_option'\]"):
        finetune_sequence_classification(checkpoint, data, tmp_path / "out", overwrite=True, not_an_option=1)
    assert saved_files(tmp_path / "out") == {"keep.txt"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    finetune_sequence_classification(checkpoint, data, tmp_path / "out", overwrite=True, max_steps=1, **QUIET)
    assert "keep.txt" not in saved_files(tmp_path / "out") and "model.safetensors" in saved_files(tmp_path / "out")


def test_training_arguments_follow_the_data(tmp_path):
    args = training_arguments(tmp_path, has_validation=True, metric="f1", eval_strategy="steps", eval_steps=7)
    assert (args.save_strategy, args.save_steps, args.metric_for_best_model) == ("steps", 7, "f1")
    assert args.load_best_model_at_end and args.greater_is_better
    args = training_arguments(tmp_path, has_validation=False, metric="f1")
    assert (args.eval_strategy, args.save_strategy, args.load_best_model_at_end) == ("no", "no", False)
    with pytest.raises(ValueError, match="load_best_model_at_end needs validation data"):
        training_arguments(tmp_path, has_validation=False, metric="f1", load_best_model_at_end=True)


def test_max_length_is_bounded_by_the_position_table():
    config = MiniBertConfig(max_position_embeddings=64)
    tokenizer = SimpleNamespace(model_max_length=10**30)  # transformers' "no limit"
    assert _max_length(None, tokenizer, config) == 64
    assert _max_length(48, tokenizer, config) == 48
    with pytest.raises(ValueError, match=r"max_length=100 must be above 2 and at most the model's max_position_embeddings=64"):
        _max_length(100, tokenizer, config)


def test_unknown_task_and_missing_model(tmp_path):
    with pytest.raises(ValueError, match=r"unknown task 'summarization'; choose one of \['sequence-classification'"):
        finetune("summarization", "x", "y", tmp_path / "o")
    data = Dataset.from_dict({"text": ["a"], "label": ["x"]})
    with pytest.raises(FileNotFoundError, match=r"no tokenizer in this folder"):
        finetune_sequence_classification(tmp_path, data, tmp_path / "o")


def test_cli_token_classification(checkpoint, tmp_path, capsys):
    output = tmp_path / "cli-ner"
    code = main([
        "finetune", "--task", "token-classification", "--model", str(checkpoint),
        "--train-file", str(NER_TRAIN), "--validation-file", str(NER_VALIDATION), "--output-dir", str(output),
        "--max-steps", "4", "--eval-strategy", "steps", "--eval-steps", "2", "--quiet",
    ])
    assert code == 0
    out = capsys.readouterr().out
    assert f"saved to {output}" in out and "validation: " in out and "f1=" in out
    config = json.loads((output / "config.json").read_text())
    assert set(config["label2id"]) == {"O", "B-LOC", "B-ORG", "B-PER", "I-LOC", "I-ORG"}
    assert_clean_output(output)
    assert oct(output.stat().st_mode & 0o777) == oct(0o777 & ~current_umask())


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_cli_with_a_datasets_folder(checkpoint, tmp_path, capsys):
    splits = DatasetDict(train=pair_data(32, seed=3), validation=pair_data(16, seed=4))
    splits.save_to_disk(tmp_path / "pairs")
    code = main([
        "finetune", "--task", "sequence-classification", "--model", str(checkpoint), "--dataset", str(tmp_path / "pairs"),
        "--text-column", "question", "--text-pair-column", "fact", "--label-column", "kind",
        "--labels", "place,company", "--output-dir", str(tmp_path / "out"), "--max-steps", "1", "--quiet",
    ])
    assert code == 0
    out = capsys.readouterr().out
    assert "validation: " in out and "accuracy=" in out  # the dataset's validation split was used
    results = json.loads((tmp_path / "out" / RESULTS_FILE).read_text())
    assert results["labels"] == ["place", "company"] and results["test"] is None


def test_finetuned_folders_work_without_the_package(sentiment_model, ner_model, qa_model, tmp_path):
    """A fresh interpreter that cannot import this project loads all three folders with plain transformers."""
    text, sentence = "A warm, funny and moving film.", "Yesterday Ana visited New York with Ben ."
    question, context = "Where does Ana live ?", "Ben works for Acme . Ana lives in Paris ."
    expected = {
        "text": pipeline("text-classification", model=str(sentiment_model.output_dir))(text)[0]["label"],
        "entities": [e["word"] for e in pipeline(
            "token-classification", model=str(ner_model.output_dir), aggregation_strategy="simple")(sentence)],
        "answer": pipeline("question-answering", model=str(qa_model.output_dir), pipeline_class=QuestionAnsweringPipeline)(
            question=question, context=context)["answer"],
    }
    code = f"""
import json
from transformers import pipeline
text = pipeline("text-classification", model={str(sentiment_model.output_dir)!r}, trust_remote_code=True)({text!r})
tagger = pipeline("token-classification", model={str(ner_model.output_dir)!r}, trust_remote_code=True,
                  aggregation_strategy="simple")
qa = pipeline("question-answering", model={str(qa_model.output_dir)!r}, trust_remote_code=True)
print(json.dumps({{
    "text": text[0]["label"],
    "entities": [e["word"] for e in tagger({sentence!r})],
    "answer": qa(question={question!r}, context={context!r})["answer"],
}}))
"""
    assert json.loads(run_python(code, cwd=tmp_path).strip().splitlines()[-1]) == expected


def test_cli_reports_bad_data(checkpoint, tmp_path, capsys):
    (tmp_path / "train.csv").write_text("review,label\ngood,pos\n")
    code = main([
        "finetune", "--task", "sequence-classification", "--model", str(checkpoint),
        "--train-file", str(tmp_path / "train.csv"), "--output-dir", str(tmp_path / "out"),
    ])
    assert code == 2
    err = capsys.readouterr().err
    assert "minibert finetune: error:" in err and "train.csv: no column 'text'; the columns are ['review', 'label']" in err
