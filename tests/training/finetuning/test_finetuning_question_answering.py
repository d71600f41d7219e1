"""Question answering: windows point at the answers, the model learns them (exact match and F1 on SQuAD's 0-100
scale), and the saved folder answers in a pipeline exactly as evaluation did."""

from __future__ import annotations

import json

import pytest
from datasets import Dataset
from fixtures.finetuning_checkpoint import FAST, QA_TRAIN, QA_VALIDATION, assert_clean_output, checkpoint  # noqa: F401 (a fixture)
from transformers import AutoTokenizer, pipeline

from modeling_minibert.question_answering_pipeline import QuestionAnsweringPipeline
from modeling_minibert.training.finetuning import finetune
from modeling_minibert.training.finetuning.data import DataError, load_data, question_answer_columns
from modeling_minibert.training.finetuning.metrics import squad_metrics
from modeling_minibert.training.finetuning.tasks.question_answering import PREDICTIONS_FILE, qa_features

pytestmark = pytest.mark.usefixtures("one_thread")


def test_qa_windows_point_at_the_answer(checkpoint):
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    data = load_data(QA_VALIDATION)
    examples = question_answer_columns(data)
    features = qa_features(tokenizer, data, examples, max_length=32, doc_stride=8)
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
    long_question = {
        "question": ["Where " + "does " * 30 + "Ana live ?"],
        "context": ["Ana lives in Lisbon ."],
        "answers": [{"text": ["Lisbon"], "answer_start": [13]}],
    }
    data = load_data(Dataset.from_dict(long_question), name="questions")
    n = len(tokenizer.tokenize(long_question["question"][0]))
    room = 32 - 3 - 8 - 1  # window - [CLS] [SEP] [SEP] - overlap - at least one new context token
    with pytest.raises(
        DataError,
        match=rf"questions, row 1, field 'question': the question is {n} tokens; with max_length=32 and doc_stride=8 it may be at most {room}",
    ):
        qa_features(tokenizer, data, question_answer_columns(data), max_length=32, doc_stride=8)


@pytest.fixture(scope="module")
def qa_model(checkpoint, tmp_path_factory):
    output = tmp_path_factory.mktemp("qa") / "model"
    return finetune(
        task="question-answering",
        model_name_or_path=checkpoint,
        train_file=QA_TRAIN,
        output_dir=output,
        validation_file=QA_VALIDATION,
        test_file=QA_VALIDATION,
        max_seq_length=32,
        doc_stride=8,
        n_best_size=3,
        num_train_epochs=12,
        **FAST,
    )


def test_question_answering_learns_the_answers(qa_model):
    # A random span of the context scores near 0; always answering with one of the context's two names (place or
    # company) would score about 50: above that, the model reads the question. Percentages, as `squad` has them.
    assert qa_model.metrics["f1"] > 60, qa_model.metrics
    assert qa_model.metrics["exact_match"] > 55
    results = json.loads((qa_model.output_dir / "all_results.json").read_text())
    assert results["eval_f1"] == pytest.approx(qa_model.metrics["f1"]) and results["eval_f1"] > 1
    # The test split is scored by the same post-processing (here it is the validation file again).
    assert {k: results[f"test_{k}"] for k in ("exact_match", "f1")} == pytest.approx(
        {k: results[f"eval_{k}"] for k in ("exact_match", "f1")}
    )
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
    # Same windows and token spans as evaluation -> the same answers -> the same scores.
    answers = qa(
        question=examples.questions,
        context=examples.contexts,
        max_seq_len=32,
        doc_stride=8,
        batch_size=8,
        align_to_words=False,
    )
    predictions = {qid: a["answer"] for qid, a in zip(examples.ids, answers)}
    references = {qid: a["text"] for qid, a in zip(examples.ids, examples.answers)}
    assert squad_metrics(predictions, references) == pytest.approx(
        {k: qa_model.metrics[k] for k in ("exact_match", "f1")}
    )
    # With this package imported, the class can also be named directly (no remote code).
    direct = pipeline("question-answering", model=str(qa_model.output_dir), pipeline_class=QuestionAnsweringPipeline)
    one = direct(question=examples.questions[0], context=examples.contexts[0], max_seq_len=32, doc_stride=8)
    assert one == pytest.approx(answers[0])
    assert set(one) == {"score", "start", "end", "answer"}
    # By default answers are whole words: each an evaluation answer widened to its words' edges, never inside one.
    words = qa(question=examples.questions, context=examples.contexts, max_seq_len=32, doc_stride=8, batch_size=8)
    for word, token, context in zip(words, answers, examples.contexts):
        assert word["start"] <= token["start"] and token["end"] <= word["end"]
        assert word["start"] == 0 or not (context[word["start"] - 1].isalnum() and context[word["start"]].isalnum())
        assert word["end"] == len(context) or not (
            context[word["end"] - 1].isalnum() and context[word["end"]].isalnum()
        )
    with pytest.raises(ValueError, match="the question is .* tokens; with max_seq_len=32"):
        direct(question="where " * 40, context="Ana lives in Lisbon .", max_seq_len=32, doc_stride=8)


def test_answer_outside_its_context_fails_before_training(checkpoint, tmp_path):
    document = json.loads(QA_TRAIN.read_text())
    document["data"][0]["paragraphs"][1]["qas"][0]["answers"][0]["answer_start"] += 1
    (tmp_path / "qa.json").write_text(json.dumps(document))
    with pytest.raises(
        DataError,
        match=r"qa\.json, row 3 \(id 'q1-0'\), field 'answers': answer '.*' is not in the context at answer_start",
    ):
        finetune(
            task="question-answering",
            model_name_or_path=checkpoint,
            train_file=tmp_path / "qa.json",
            output_dir=tmp_path / "out",
        )
    assert not (tmp_path / "out").exists()
