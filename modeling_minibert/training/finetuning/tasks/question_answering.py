"""Extractive question answering (SQuAD v1 style): question + context -> answer span; exact match and F1 (0-100).

As in transformers' run_qa.py + utils_qa.py, the task also builds its features (overlapping context windows with
the answer's token span) and decodes answers from start/end logits. The window and span arithmetic itself lives in
`question_answering_pipeline.py`, which travels with every QA checkpoint, so that training, evaluation and the
pipeline cut and read windows identically.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from datasets import Dataset
from transformers import (
    EvalPrediction,
    PreTrainedTokenizerBase,
    Trainer,
    default_data_collator,
)
from transformers.trainer_utils import PredictionOutput

from modeling_minibert import question_answering_pipeline
from modeling_minibert.question_answering_pipeline import (
    best_answers,
    check_window,
    default_window,
    question_room,
    tokenize_windows,
)
from modeling_minibert.training.finetuning.arguments import FinetuneArguments
from modeling_minibert.training.finetuning.data import (
    DataError,
    NamedDataset,
    QuestionAnswerExamples,
    column_values,
    question_answer_columns,
)
from modeling_minibert.training.finetuning.loading import check_max_length, load_tokenizer_and_config
from modeling_minibert.training.finetuning.metrics import squad_metrics
from modeling_minibert.training.finetuning.task import Prepared, Setup, Task
from modeling_minibert.utils.files import write_json

PREDICTIONS_FILE = "eval_predictions.json"


def prepare(args: FinetuneArguments, splits: dict[str, NamedDataset]) -> Setup:
    """Extractive question answering (SQuAD v1 style: every answer is a span of its context).

    Each question + context becomes windows of `max_seq_length` tokens that overlap by `doc_stride` tokens
    (defaults: the model's `max_position_embeddings`, and a quarter of it). A window that holds the whole answer
    is trained to point at it; the others point at [CLS]. At evaluation the best span over all windows of a
    question, at most `max_answer_length` tokens long, is its answer; `eval_predictions.json` keeps the
    `n_best_size` candidates of each question.

    Data: SQuAD JSON files, or JSON / JSON-lines / `datasets` data with question, context and answers columns
    (answers as {"text": [...], "answer_start": [...]}, or a list of {"text", "answer_start"}). The saved folder
    carries the question-answering pipeline (transformers 5 has none):
    `pipeline("question-answering", model=output_dir, trust_remote_code=True)`.
    """
    examples = {
        role: question_answer_columns(
            data, args.question_column_name, args.context_column_name, args.answer_column_name
        )
        for role, data in splits.items()
    }
    tok, config = load_tokenizer_and_config(args)
    default_length, default_stride = default_window(tok, config)
    length = check_max_length(args.max_seq_length, tok, config) if args.max_seq_length is not None else default_length
    stride = args.doc_stride if args.doc_stride is not None else min(default_stride, length // 4)
    check_window(tok, length, stride, "max_seq_length")
    features = {role: qa_features(tok, splits[role], examples[role], length, stride) for role in splits}
    prepared = Prepared(
        train=features["train"],
        validation=features.get("validation"),
        test=features.get("test"),
        collator=default_data_collator,  # windows are padded to max_length already
        metric="f1",
        metrics_for=lambda role: squad_scores(examples[role], features[role], args.max_answer_length),
    )
    outputs = pipeline_and_predictions(
        examples.get("validation"), prepared.validation, args.n_best_size, args.max_answer_length
    )
    return Setup(tok, prepared, extra_outputs=outputs)


def squad_scores(
    examples: QuestionAnswerExamples, features: Dataset, max_answer_length: int
) -> Callable[[EvalPrediction], dict[str, float]]:
    """compute_metrics of one split: the best answer of each question, scored with SQuAD's exact match and F1."""

    def compute(p: EvalPrediction) -> dict[str, float]:
        start_logits, end_logits = p.predictions
        answers = qa_answers(examples, features, start_logits, end_logits, 1, max_answer_length)
        predictions = {qid: found[0]["answer"] if found else "" for qid, found in answers.items()}
        references = dict(zip(examples.ids, (a["text"] for a in examples.answers)))
        return squad_metrics(predictions, references)

    return compute


def pipeline_and_predictions(
    examples: QuestionAnswerExamples | None, features: Dataset | None, n_best: int, max_answer_length: int
) -> Callable[[Trainer, Path, PredictionOutput | None], None]:
    """The task's own outputs: the pipeline file beside the weights, and the validation n-best answers."""

    def write(trainer: Trainer, staging: Path, validation: PredictionOutput | None) -> None:
        # The pipeline file travels with the weights; the config tells pipeline() where it is.
        trainer.model.config.custom_pipelines = question_answering_pipeline.CUSTOM_PIPELINES
        shutil.copy(question_answering_pipeline.__file__, staging / Path(question_answering_pipeline.__file__).name)
        if validation is not None:
            start_logits, end_logits = validation.predictions
            write_json(
                staging / PREDICTIONS_FILE,
                qa_answers(examples, features, start_logits, end_logits, n_best, max_answer_length),
            )

    return write


def qa_features(
    tokenizer: PreTrainedTokenizerBase,
    data: NamedDataset,
    examples: QuestionAnswerExamples,
    max_length: int,
    doc_stride: int,
) -> Dataset:
    """Windows of each question + context with the answer's token span (start_positions, end_positions; 0 = [CLS]
    when the window does not hold the whole answer), plus what post-processing needs: example_index,
    offset_mapping and context_mask."""
    room = question_room(tokenizer, max_length, doc_stride)
    question_lengths = [len(ids) for ids in tokenizer(examples.questions, add_special_tokens=False)["input_ids"]]
    for i, n in enumerate(question_lengths):
        if n > room:
            raise DataError(
                f"{data.where(i, 'question')}: the question is {n} tokens; with max_length={max_length} and "
                f"doc_stride={doc_stride} it may be at most {room} (raise max_length or lower doc_stride)"
            )
    encoding = tokenize_windows(tokenizer, examples.questions, examples.contexts, max_length, doc_stride)
    example_index = encoding.pop("overflow_to_sample_mapping")
    starts, ends, masks = [], [], []
    for w, offsets in enumerate(encoding["offset_mapping"]):
        context_mask = [sid == 1 for sid in encoding.sequence_ids(w)]
        context_tokens = [t for t, inside in enumerate(context_mask) if inside]
        answer = examples.answers[example_index[w]]
        start_char = answer["answer_start"][0]
        end_char = start_char + len(answer["text"][0])
        first, last = context_tokens[0], context_tokens[-1]
        if offsets[first][0] <= start_char and offsets[last][1] >= end_char:
            start = first
            while start < last and offsets[start][1] <= start_char:
                start += 1  # the first token that ends after the answer starts
            end = last
            while end > start and offsets[end][0] >= end_char:
                end -= 1  # the last token that starts before the answer ends
        else:
            start = end = 0
        starts.append(start)
        ends.append(end)
        masks.append(context_mask)
    return Dataset.from_dict(
        {
            **encoding,
            "start_positions": starts,
            "end_positions": ends,
            "example_index": example_index,
            "context_mask": masks,
        }
    )


def qa_answers(
    examples: QuestionAnswerExamples,
    features: Dataset,
    start_logits: np.ndarray,
    end_logits: np.ndarray,
    n_best: int,
    max_answer_length: int,
) -> dict[str, list[dict[str, Any]]]:
    """Question id -> its `n_best` answers (best first), from the logits (num_windows, T) of its windows."""
    windows: dict[int, list] = {}
    offsets = column_values(features, "offset_mapping")
    masks = column_values(features, "context_mask")
    for w, example in enumerate(column_values(features, "example_index")):
        windows.setdefault(example, []).append((start_logits[w], end_logits[w], offsets[w], masks[w]))
    return {
        examples.ids[i]: best_answers(windows.get(i, []), examples.contexts[i], n_best, max_answer_length)
        for i in range(len(examples.ids))
    }


# Not distillable (no `read`): its targets are spans over context windows, not one distribution per input.
TASK = Task(
    name="question-answering",
    auto_class_name="AutoModelForQuestionAnswering",
    prepare=prepare,
    collator=lambda tokenizer: default_data_collator,
)
