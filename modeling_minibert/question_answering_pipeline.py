"""Extractive question answering as a transformers pipeline, and the span decoding that fine-tuning shares with it.

transformers 5 removed its extractive `QuestionAnsweringPipeline` (the task name now points users at chat
models), yet a model fine-tuned with `MiniBertForQuestionAnswering` still needs "question + context in, a span of
the context out". Fine-tuning copies this file next to the weights and names it in the config's
`custom_pipelines`, so that

    pipeline("question-answering", model=FOLDER, trust_remote_code=True)

finds it (or, with this package imported, `pipeline(..., pipeline_class=QuestionAnsweringPipeline)`).
Self-contained on purpose: it imports only numpy, torch and transformers, because it travels with checkpoints.

Shapes: T window length in tokens, W windows of one context.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from transformers import PretrainedConfig, PreTrainedTokenizerBase
from transformers.pipelines.base import ChunkPipeline
from transformers.pipelines.document_question_answering import select_starts_ends

# As in the SQuAD literature (and transformers' former pipeline): at most 384 tokens per window, 128 of overlap.
MAX_WINDOW_LENGTH = 384
MAX_DOC_STRIDE = 128


def default_window(tokenizer: PreTrainedTokenizerBase, config: PretrainedConfig) -> tuple[int, int]:
    """(max_length, doc_stride) that fit the model: windows as long as its position table allows, 1/4 overlap."""
    limits = [MAX_WINDOW_LENGTH, tokenizer.model_max_length]
    limits.append(getattr(config, "max_position_embeddings", MAX_WINDOW_LENGTH))
    max_length = int(min(limits))
    return max_length, min(MAX_DOC_STRIDE, max_length // 4)


def question_room(tokenizer: PreTrainedTokenizerBase, max_length: int, doc_stride: int) -> int:
    """The longest question (in tokens) that leaves a context window longer than `doc_stride`.

    `tokenizers` panics (an uncatchable-looking PanicException) when the overlap does not fit in what the question
    leaves of the window, so callers check questions against this first.
    """
    return max_length - tokenizer.num_special_tokens_to_add(pair=True) - doc_stride - 1


def check_window(
    tokenizer: PreTrainedTokenizerBase,
    max_length: int,
    doc_stride: int,
    length_name: str = "max_seq_len",
    positions: int | None = None,
) -> None:
    """ValueError in one line, naming the option and its limit, for windows no question fits in: `doc_stride`
    negative, or so close to `max_length` (the option `length_name`) that the special tokens, the overlap and one
    new context token leave no room for one question token; and for `max_length` past the model's `positions`.
    Checked before any question is: otherwise the first question would be blamed."""
    if positions is not None and max_length > positions:
        raise ValueError(f"{length_name}={max_length} exceeds the model's max_position_embeddings={positions}")
    most = question_room(tokenizer, max_length, 0) - 1  # the overlap that leaves one question token
    if not 0 <= doc_stride <= most:
        raise ValueError(
            f"doc_stride={doc_stride} must be at least 0 and at most {most} with {length_name}={max_length}: "
            f"each window holds {tokenizer.num_special_tokens_to_add(pair=True)} special tokens, the question, "
            "the overlap and at least one new context token"
        )


def tokenize_windows(
    tokenizer: PreTrainedTokenizerBase,
    questions: list[str],
    contexts: list[str],
    max_length: int,
    doc_stride: int,
    padding: bool | str = "max_length",
    return_tensors: str | None = None,
):
    """Question + context pairs -> overlapping windows over each context (the question repeated in each).

    Returns the tokenizer's `BatchEncoding` with `offset_mapping` (character span of each token in its own text)
    and `overflow_to_sample_mapping` (window -> pair index); `sequence_ids(i)` tells question (0) from context (1).
    """
    return tokenizer(
        questions,
        contexts,
        truncation="only_second",
        max_length=max_length,
        stride=doc_stride,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
        padding=padding,
        return_tensors=return_tensors,
    )


def best_answers(
    windows: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
    context: str,
    top_k: int = 1,
    max_answer_len: int = 30,
    word_ids: list[np.ndarray] | None = None,
) -> list[dict[str, Any]]:
    """The `top_k` best answer spans of one context, read from the logits of its windows.

    Args:
        windows: per window, (start_logits (T,), end_logits (T,), offsets (T, 2) character spans of the tokens,
            context_mask (T,) True where the token belongs to the context).
        context: the text the offsets point into.
        top_k: how many answers to return (the n-best list), best first.
        max_answer_len: longest answer, in tokens.
        word_ids: per window, the word (T,) each token belongs to (-1 outside the context), to widen each span to
            whole words as transformers' former pipeline did (`align_to_words`): "Oslo", never its piece "##lo".
            None keeps the token spans (what SQuAD-style evaluation scores).

    Returns:
        [{"score", "start", "end", "answer"}], `context[start:end] == answer`. Scores are start x end
        probabilities within a window (softmax over its context tokens), comparable across windows.
    """
    best: dict[tuple[int, int], float] = {}
    for w, (start_logits, end_logits, offsets, context_mask) in enumerate(windows):
        context_mask = np.asarray(context_mask, dtype=bool)
        if not context_mask.any():
            continue
        # transformers' span decoder: softmax over allowed tokens, start <= end < start + max_answer_len, top-k.
        starts, ends, scores, _ = select_starts_ends(
            np.asarray(start_logits, dtype=np.float32)[None],
            np.asarray(end_logits, dtype=np.float32)[None],
            p_mask=(~context_mask).astype(np.int64),
            attention_mask=np.ones_like(context_mask, dtype=np.int64),
            top_k=top_k,
            max_answer_len=max_answer_len,
        )
        for s, e, score in zip(starts, ends, scores):
            if word_ids is not None:
                s, e = word_span(word_ids[w], s, e)
            span = (int(offsets[s][0]), int(offsets[e][1]))
            # Overlapping windows propose the same span: keep its best score once.
            best[span] = max(float(score), best.get(span, 0.0))
    ranked = sorted(best.items(), key=lambda item: -item[1])[:top_k]
    return [{"score": score, "start": s, "end": e, "answer": context[s:e]} for (s, e), score in ranked]


def word_span(word_ids: np.ndarray, start: int, end: int) -> tuple[int, int]:
    """Token span [start, end] widened to the first token of start's word and the last of end's word."""
    words = np.asarray(word_ids)
    same_start = np.flatnonzero(words == words[start])
    same_end = np.flatnonzero(words == words[end])
    # A word's tokens are contiguous within a window; a piece cut off by the window edge stays where it is.
    return int(same_start[0]), int(same_end[-1])


class QuestionAnsweringPipeline(ChunkPipeline):
    """Answer a question with a span of a context, using any `AutoModelForQuestionAnswering` model.

    Long contexts are split into overlapping windows (`max_seq_len`, `doc_stride`), each window runs through the
    model, and the best span over all windows wins.

        qa = pipeline("question-answering", model=FOLDER, trust_remote_code=True)
        qa(question="Where does Ana live?", context="Ana lives in Lisbon.")
        # {'score': 0.93, 'start': 13, 'end': 19, 'answer': 'Lisbon'}

    Call with `question=` and `context=` (strings, or lists of equal length), a {"question", "context"} dict, or a
    list of such dicts. Options: `top_k` (answers per question), `max_answer_len` (tokens), `max_seq_len`,
    `doc_stride`, `align_to_words` (default True: answers are whole words, as in transformers' former pipeline).
    """

    def __call__(
        self, *args, question: str | list[str] | None = None, context: str | list[str] | None = None, **kwargs
    ):
        if question is not None or context is not None:
            if question is None or context is None:
                raise ValueError("pass both question= and context=")
            if isinstance(question, str) != isinstance(context, str):
                raise ValueError("question and context must both be strings or both be lists")
            if isinstance(question, str):
                return super().__call__({"question": question, "context": context}, **kwargs)
            if len(question) != len(context):
                raise ValueError(f"got {len(question)} questions but {len(context)} contexts")
            return super().__call__([{"question": q, "context": c} for q, c in zip(question, context)], **kwargs)
        if len(args) != 1:
            raise ValueError("pass question= and context=, or one {'question', 'context'} dict or a list of them")
        return super().__call__(args[0], **kwargs)

    def _sanitize_parameters(
        self,
        top_k: int | None = None,
        max_answer_len: int | None = None,
        max_seq_len: int | None = None,
        doc_stride: int | None = None,
        align_to_words: bool | None = None,
        **kwargs,
    ) -> tuple[dict, dict, dict]:
        preprocess, postprocess = {}, {}
        if max_seq_len is not None:
            preprocess["max_seq_len"] = max_seq_len
        if doc_stride is not None:
            preprocess["doc_stride"] = doc_stride
        if top_k is not None:
            if top_k < 1:
                raise ValueError(f"top_k must be at least 1, got {top_k}")
            postprocess["top_k"] = top_k
        if max_answer_len is not None:
            if max_answer_len < 1:
                raise ValueError(f"max_answer_len must be at least 1, got {max_answer_len}")
            postprocess["max_answer_len"] = max_answer_len
        if align_to_words is not None:
            postprocess["align_to_words"] = bool(align_to_words)
        return preprocess, {}, postprocess

    def preprocess(self, inputs: dict[str, str], max_seq_len: int | None = None, doc_stride: int | None = None):
        if not isinstance(inputs, dict) or not {"question", "context"} <= set(inputs):
            raise ValueError(f"each input must be a dict with 'question' and 'context', got {inputs!r}")
        question, context = inputs["question"], inputs["context"]
        if not isinstance(question, str) or not question.strip():
            raise ValueError(f"the question must be a non-empty string, got {question!r}")
        if not isinstance(context, str) or not context.strip():
            raise ValueError(f"the context must be a non-empty string, got {context!r}")
        default_length, default_stride = default_window(self.tokenizer, self.model.config)
        max_seq_len = max_seq_len if max_seq_len is not None else default_length
        doc_stride = doc_stride if doc_stride is not None else min(default_stride, max_seq_len // 4)
        check_window(
            self.tokenizer,
            max_seq_len,
            doc_stride,
            positions=getattr(self.model.config, "max_position_embeddings", None),
        )
        room = question_room(self.tokenizer, max_seq_len, doc_stride)
        question_length = len(self.tokenizer(question, add_special_tokens=False)["input_ids"])
        if question_length > room:
            raise ValueError(
                f"the question is {question_length} tokens; with max_seq_len={max_seq_len} and "
                f"doc_stride={doc_stride} it may be at most {room}"
            )
        encoding = tokenize_windows(
            self.tokenizer, [question], [context], max_seq_len, doc_stride, padding="longest", return_tensors="pt"
        )
        num_windows = len(encoding["input_ids"])
        for i in range(num_windows):
            sequence_ids = encoding.sequence_ids(i)
            context_mask = torch.tensor([sid == 1 for sid in sequence_ids])
            words = [word if sid == 1 else -1 for word, sid in zip(encoding.word_ids(i), sequence_ids)]
            window = {name: encoding[name][i : i + 1] for name in self.tokenizer.model_input_names if name in encoding}
            yield {
                **window,
                "offset_mapping": encoding["offset_mapping"][i : i + 1],  # (1, T, 2)
                "context_mask": context_mask[None],  # (1, T)
                "word_ids": torch.tensor(words)[None],  # (1, T)
                "context": context,
                "is_last": i == num_windows - 1,
            }

    def _forward(self, inputs: dict[str, Any]) -> dict[str, Any]:
        extras = {
            name: inputs.pop(name) for name in ("offset_mapping", "context_mask", "word_ids", "context", "is_last")
        }
        outputs = self.model(**inputs)
        return {"start_logits": outputs.start_logits, "end_logits": outputs.end_logits, **extras}

    def postprocess(
        self, all_outputs: list[dict[str, Any]], top_k: int = 1, max_answer_len: int = 30, align_to_words: bool = True
    ):
        windows = [
            (
                out["start_logits"][0].float().numpy(),
                out["end_logits"][0].float().numpy(),
                out["offset_mapping"][0].numpy(),
                out["context_mask"][0].numpy(),
            )
            for out in all_outputs
        ]
        context = all_outputs[0]["context"]
        context = context[0] if isinstance(context, list) else context
        words = [out["word_ids"][0].numpy() for out in all_outputs] if align_to_words else None
        answers = best_answers(windows, context, top_k=top_k, max_answer_len=max_answer_len, word_ids=words)
        if top_k == 1:
            # No span at all only happens when no window kept a context token; answer empty rather than fail.
            return answers[0] if answers else {"score": 0.0, "start": 0, "end": 0, "answer": ""}
        return answers


# What fine-tuning writes into a QA checkpoint's config so that `pipeline("question-answering", ...)` finds this file.
CUSTOM_PIPELINES = {
    "question-answering": {
        "impl": "question_answering_pipeline.QuestionAnsweringPipeline",
        "pt": ["AutoModelForQuestionAnswering"],
        "type": "text",
    }
}

__all__ = [
    "CUSTOM_PIPELINES",
    "QuestionAnsweringPipeline",
    "best_answers",
    "check_window",
    "default_window",
    "question_room",
    "tokenize_windows",
    "word_span",
]
