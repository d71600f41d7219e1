"""The encoder and its heads against transformers' BERT, plus saving, loading and input checks."""

from __future__ import annotations

import json
import re
import threading

import pytest
import torch
import transformers
from fixtures.environment import run_python
from fixtures.models import TINY, padded_batch, ragged_batch
from transformers import AutoModel, AutoModelForMaskedLM, BertConfig

import modeling_minibert
from modeling_minibert import AUTO_CLASSES, MiniBertConfig, checks_minibert
from modeling_minibert.checks_minibert import check_inputs, check_labels, read_safetensors_header
from modeling_minibert.configuration_minibert import check_model_path
from modeling_minibert.modeling_minibert import (
    MiniBertForMaskedLM,
    MiniBertForPreTraining,
    Packing,
    functional_dropout,
)
from modeling_minibert.sharing.bert_format import HEADS
from modeling_minibert.utils import outputs

CONFIGS = {
    "tiny-gelu": dict(TINY),
    "relu-odd-sizes": dict(
        TINY,
        hidden_size=48,
        num_attention_heads=3,
        intermediate_size=80,
        hidden_act="relu",
        type_vocab_size=3,
        layer_norm_eps=1e-6,
    ),
    "gelu_new-untied-3-layers": dict(TINY, hidden_act="gelu_new", num_hidden_layers=3, tie_word_embeddings=False),
}


# Output fields Mini-BERT adds to BERT's (the parts of the pretraining loss, and where sparse logits sit).
MINI_BERT_ONLY_FIELDS = ("mlm_loss", "next_sentence_loss", "masked_positions")


def twin_models(head: str, config_kwargs: dict, attn: str = "sdpa", unpad: bool = True, **extra):
    """A randomly initialised transformers BERT head and a Mini-BERT head holding the same weights."""
    bert = getattr(transformers, f"Bert{head}")(BertConfig(**config_kwargs, **extra, attn_implementation=attn))
    config = MiniBertConfig(**config_kwargs, **extra, unpad_inputs=unpad, attn_implementation=attn)
    mini = getattr(modeling_minibert, f"MiniBert{head}")(config)
    state = {k: v for k, v in bert.state_dict().items() if k != "cls.predictions.decoder.bias"}
    mini.load_state_dict(state, strict=True)
    return bert.eval(), mini.eval()


def head_inputs(head: str, vocab_size: int, num_labels: int = 2) -> dict:
    ids, mask, types = padded_batch(vocab_size)
    inputs = dict(input_ids=ids, attention_mask=mask, token_type_ids=types)
    batch, length = ids.shape
    g = torch.Generator().manual_seed(1)
    if head in ("ForPreTraining", "ForMaskedLM"):
        labels = torch.where(torch.rand(ids.shape, generator=g) < 0.3, ids, -100).masked_fill(mask == 0, -100)
        labels[0, 1] = ids[0, 1]  # at least one label
        inputs["labels"] = labels
        if head == "ForPreTraining":
            inputs["next_sentence_label"] = torch.tensor([0, 1, 0])
    elif head in ("ForNextSentencePrediction", "ForSequenceClassification"):
        inputs["labels"] = torch.tensor([0, 1, 1])
    elif head == "ForTokenClassification":
        inputs["labels"] = torch.randint(0, num_labels, ids.shape, generator=g).masked_fill(mask == 0, -100)
    elif head == "ForQuestionAnswering":
        # The last end position lies beyond the sequence: BERT clamps it and ignores that term.
        inputs["start_positions"] = torch.tensor([1, 2, 3])
        inputs["end_positions"] = torch.tensor([4, 5, length + 7])
    elif head == "ForMultipleChoice":
        inputs = {k: v.unsqueeze(0).expand(2, -1, -1).contiguous() for k, v in inputs.items()}  # (2, 3 choices, T)
        inputs["labels"] = torch.tensor([2, 0])
    return inputs


def assert_outputs_match(bert_out, mini_out, mask: torch.Tensor, atol: float = 1e-5):
    """Every output field matches; token-level fields are compared at real tokens (padding positions are
    unspecified once the encoder runs unpadded)."""
    keep = mask.bool()
    bert_fields = {k: v for k, v in bert_out.items() if v is not None}
    mini_fields = {k: v for k, v in mini_out.items() if v is not None and k not in MINI_BERT_ONLY_FIELDS}
    assert bert_fields.keys() == mini_fields.keys()
    for key, expected in bert_fields.items():
        got = mini_fields[key]
        pairs = zip(expected, got) if isinstance(expected, tuple) else [(expected, got)]
        for e, g in pairs:
            assert e.shape == g.shape, key
            if e.dim() >= 2 and e.shape[:2] == keep.shape:
                e, g = e[keep], g[keep]
            torch.testing.assert_close(g, e, atol=atol, rtol=1e-4, msg=f"{key} differs")


@pytest.mark.parametrize("head", HEADS)
@pytest.mark.parametrize("config_name", list(CONFIGS))
def test_every_head_matches_bert(head, config_name):
    config_kwargs = CONFIGS[config_name]
    num_labels = 3
    extra = dict(num_labels=num_labels) if head in ("ForSequenceClassification", "ForTokenClassification") else {}
    inputs = head_inputs(head, config_kwargs["vocab_size"], num_labels)
    mask = inputs["attention_mask"]
    if head == "ForMultipleChoice":
        mask = mask.flatten(0, 1)
    for attn in ("eager", "sdpa"):
        for unpad in (True, False):
            bert, mini = twin_models(head, config_kwargs, attn=attn, unpad=unpad, **extra)
            with torch.no_grad():
                kwargs = dict(output_hidden_states=True)
                expected = bert(**inputs, **kwargs)
                got = mini(**inputs, **kwargs)
            # multiple choice: hidden states are per flattened (batch * choice) sequence, hence the flat mask
            assert_outputs_match(expected, got, mask)
            if not unpad:  # the padded path is BERT to the letter, padding positions included
                torch.testing.assert_close(got[1], expected[1], atol=1e-5, rtol=1e-4)
            if head != "Model":
                assert got.loss is not None and torch.isfinite(got.loss)


@pytest.mark.parametrize(
    "problem_type, labels",
    [
        ("regression", torch.tensor([[0.5], [-1.0], [2.0]])),
        ("single_label_classification", torch.tensor([0, 2, 1])),
        ("multi_label_classification", torch.tensor([[1.0, 0, 1], [0, 0, 1], [1, 1, 0]])),
    ],
)
def test_sequence_classification_problem_types_match_bert(problem_type, labels):
    num_labels = 1 if problem_type == "regression" else 3
    bert, mini = twin_models("ForSequenceClassification", TINY, num_labels=num_labels, problem_type=problem_type)
    ids, mask, types = padded_batch(TINY["vocab_size"])
    with torch.no_grad():
        expected = bert(ids, attention_mask=mask, token_type_ids=types, labels=labels)
        got = mini(ids, attention_mask=mask, token_type_ids=types, labels=labels)
    torch.testing.assert_close(got.logits, expected.logits, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(got.loss, expected.loss, atol=1e-5, rtol=1e-4)


def test_attentions_match_eager_bert_whatever_the_backend():
    bert, _ = twin_models("Model", TINY, attn="eager")
    _, mini = twin_models("Model", TINY, attn="sdpa")
    mini.load_state_dict(bert.state_dict())
    ids, mask, types = padded_batch(TINY["vocab_size"])
    with torch.no_grad():
        expected = bert(ids, attention_mask=mask, token_type_ids=types, output_attentions=True)
        got = mini(ids, attention_mask=mask, token_type_ids=types, output_attentions=True)
    assert len(got.attentions) == TINY["num_hidden_layers"]
    for e, g in zip(expected.attentions, got.attentions):
        assert g.shape == (3, TINY["num_attention_heads"], 12, 12)
        torch.testing.assert_close(g, e, atol=1e-6, rtol=1e-5)
    assert mini.config._attn_implementation == "sdpa"  # switched to eager for that call only


def test_concurrent_calls_with_and_without_attentions_give_single_threaded_outputs():
    """Asking for attentions picks the eager kernel for that call only, without touching the config that every
    thread shares: a thread that does not ask keeps its backend, and one that asks gets its weights."""
    _, model = twin_models("Model", TINY, attn="sdpa")
    ids, mask, types = padded_batch(TINY["vocab_size"])
    with torch.no_grad():
        reference = {
            wants: model(ids, attention_mask=mask, token_type_ids=types, output_attentions=wants)
            for wants in (False, True)
        }
    assert reference[True].attentions is not None and reference[False].attentions is None
    start = threading.Barrier(2)
    failures = []

    def run(wants_attentions: bool) -> None:
        start.wait()
        try:
            for _ in range(60):
                with torch.no_grad():
                    out = model(ids, attention_mask=mask, token_type_ids=types, output_attentions=wants_attentions)
                expected = reference[wants_attentions]
                # the same kernels as single-threaded: bit for bit
                assert torch.equal(out.last_hidden_state, expected.last_hidden_state)
                if wants_attentions:
                    assert all(torch.equal(g, e) for g, e in zip(out.attentions, expected.attentions, strict=True))
        except Exception as err:  # reported by the main thread
            failures.append((wants_attentions, repr(err)))

    threads = [threading.Thread(target=run, args=(wants,)) for wants in (False, True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures
    assert model.config._attn_implementation == "sdpa"


def test_unpad_inputs_argument_chooses_the_path_for_one_call():
    """`unpad_inputs=False` (what the QA head asks) gives BERT's hidden states at padding positions too; the
    default path leaves them at zero. Neither call changes the model."""
    bert, mini = twin_models("Model", TINY)
    ids, mask, types = padded_batch(TINY["vocab_size"])
    padding = ~mask.bool()
    with torch.no_grad():
        expected = bert(ids, attention_mask=mask, token_type_ids=types).last_hidden_state
        padded = mini(ids, attention_mask=mask, token_type_ids=types, unpad_inputs=False).last_hidden_state
        unpadded = mini(ids, attention_mask=mask, token_type_ids=types).last_hidden_state
    torch.testing.assert_close(padded, expected, atol=1e-5, rtol=1e-4)
    assert padding.any() and not torch.equal(padded[padding], torch.zeros_like(padded[padding]))
    assert torch.equal(unpadded[padding], torch.zeros_like(unpadded[padding]))
    assert mini.config.unpad_inputs


def test_default_config_unpads_and_predicts_sparsely():
    """The speed features are on by default, and a default model really uses them (every other test passes
    them explicitly): padding positions come out as the unpadded path's zeros, training MLM logits are (M, V)."""
    config = MiniBertConfig(**TINY)
    assert config.unpad_inputs is True and config.sparse_prediction is True
    model = modeling_minibert.MiniBertForMaskedLM(config)
    inputs = head_inputs("ForMaskedLM", TINY["vocab_size"])
    padding = inputs["attention_mask"] == 0
    assert padding.any()
    with torch.no_grad():
        hidden = model.eval()(**inputs, output_hidden_states=True).hidden_states[-1]
    assert torch.equal(hidden[padding], torch.zeros_like(hidden[padding]))
    out = model.train()(**inputs)
    assert out.logits.shape == (int((inputs["labels"] != -100).sum()), TINY["vocab_size"])
    assert out.masked_positions is not None


def test_packing_buckets_sequences_by_length_and_moves_tokens_losslessly():
    ids, mask, _ = ragged_batch(TINY["vocab_size"])
    mask = torch.cat([mask, torch.zeros_like(mask[:1])])  # and a row without tokens
    packing = Packing.from_mask(mask)
    # Longest first, lengths rounded up to multiples of 16: 40, 33 | 31, 20, 17 | 16, 9, 1; the empty row nowhere.
    assert packing.bucket_shapes == [(2, 48), (3, 32), (3, 16)] and packing.bucket_full == [False] * 3
    order = [0, 1, 7, 2, 3, 4, 5, 6]
    padding_masks = packing.padding_masks()
    assert [m.sum(1).tolist() for m in padding_masks] == [[40, 33], [31, 20, 17], [16, 9, 1]]
    # The varlen kernels' view of the same packing: where each non-empty sequence starts, and the longest.
    assert packing.cu_seqlens.tolist() == [0, 40, 73, 104, 124, 141, 157, 166, 167] and packing.max_length == 40
    assert packing.cu_seqlens.dtype == torch.int32

    x = torch.randn(*mask.shape, 5)
    packed = packing.unpad(x)
    assert packed.shape == (int(mask.sum()), 5)
    assert torch.equal(packing.pad(packed), x * mask[..., None])
    buckets = packing.to_buckets(packed)
    rows = [
        (bucket[i], bucket_mask[i]) for bucket, bucket_mask in zip(buckets, padding_masks) for i in range(len(bucket))
    ]
    for (bucket_row, real), sequence in zip(rows, order, strict=True):  # each bucket row: one sequence, in order
        assert torch.equal(bucket_row[real], x[sequence][mask[sequence].bool()])
    assert torch.equal(packing.from_buckets(buckets), packed)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_mixed_length_batch_matches_bert_across_buckets(attn):
    """Left padding, a hole in the mask and lengths spanning three attention buckets, against BERT."""
    bert, mini = twin_models("ForPreTraining", dict(TINY, max_position_embeddings=40), attn=attn)
    ids, mask, types = ragged_batch(TINY["vocab_size"])
    masks_seen = []
    for layer in mini.bert.encoder.layer:  # what the layers are given as attention_mask: a tensor or None
        layer.register_forward_pre_hook(lambda module, args: masks_seen.append(args[1]))
    with torch.no_grad():
        expected = bert(ids, mask, types, output_hidden_states=True)
        got = mini(ids, mask, types, output_hidden_states=True)
    assert masks_seen == [None] * TINY["num_hidden_layers"]  # packed: each bucket's mask travels in `Packing`
    # NSP reads position 0, which is padding in the left-padded row: BERT scores its padding there, Mini-BERT zeros.
    cls_is_real = mask[:, 0].bool()
    torch.testing.assert_close(got.seq_relationship_logits[cls_is_real], expected.seq_relationship_logits[cls_is_real])
    token_level = [{k: v for k, v in out.items() if k != "seq_relationship_logits"} for out in (expected, got)]
    assert_outputs_match(*token_level, mask)


@pytest.mark.parametrize("batch", [padded_batch, ragged_batch])
def test_unpadded_path_equals_padded_path_in_training(batch):
    """Same weights, same data: outputs and gradients agree between the unpadded and the padded encoder."""
    config_kwargs = dict(TINY, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, max_position_embeddings=40)
    ids, mask, types = batch(TINY["vocab_size"])
    labels = torch.where(torch.rand(ids.shape, generator=torch.Generator().manual_seed(1)) < 0.3, ids, -100)
    inputs = dict(
        input_ids=ids,
        attention_mask=mask,
        token_type_ids=types,
        labels=labels.masked_fill(mask == 0, -100),
        # -100 (ignored) where position 0, which NSP reads, is padding: see the test above
        next_sentence_label=(torch.arange(len(ids)) % 2).masked_fill(mask[:, 0] == 0, -100),
    )
    results = []
    for unpad in (True, False):
        torch.manual_seed(0)
        model = modeling_minibert.MiniBertForPreTraining(
            MiniBertConfig(**config_kwargs, unpad_inputs=unpad, sparse_prediction=False)
        ).train()
        out = model(**inputs)
        out.loss.backward()
        results.append((out, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}))
    (unpadded, grads_unpadded), (padded, grads_padded) = results
    keep = inputs["attention_mask"].bool()
    torch.testing.assert_close(unpadded.prediction_logits[keep], padded.prediction_logits[keep], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(unpadded.loss, padded.loss, atol=1e-5, rtol=1e-5)
    assert grads_unpadded.keys() == grads_padded.keys()
    for name in grads_padded:
        torch.testing.assert_close(grads_unpadded[name], grads_padded[name], atol=1e-5, rtol=1e-4, msg=name)


def test_sparse_prediction_scores_only_labelled_positions_with_the_same_loss():
    config_kwargs = dict(TINY, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    inputs = head_inputs("ForMaskedLM", TINY["vocab_size"])
    num_labelled = int((inputs["labels"] != -100).sum())
    losses = {}
    for sparse in (True, False):
        torch.manual_seed(0)
        model = modeling_minibert.MiniBertForMaskedLM(MiniBertConfig(**config_kwargs, sparse_prediction=sparse))
        out = model.train()(**inputs)
        losses[sparse] = out.loss
        expected_shape = (num_labelled, TINY["vocab_size"]) if sparse else (3, 12, TINY["vocab_size"])
        assert out.logits.shape == expected_shape
    torch.testing.assert_close(losses[True], losses[False])
    with torch.no_grad():  # evaluation keeps full logits, as callers of an eval loop expect
        assert model.eval()(**inputs).logits.shape == (3, 12, TINY["vocab_size"])


@pytest.mark.parametrize("head", ["ForPreTraining", "ForMaskedLM"])
def test_masked_positions_let_sparse_logits_be_scored_as_dense_ones(head):
    """What an evaluation loop does with the outputs alone: sparse rows at `masked_positions` give the same
    predictions, accuracy and loss as the dense logits at the labelled positions."""
    config_kwargs = dict(TINY, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    inputs = head_inputs(head, TINY["vocab_size"])
    labels = inputs["labels"]
    outputs = {}
    for sparse in (True, False):
        torch.manual_seed(0)
        model = getattr(modeling_minibert, f"MiniBert{head}")(
            MiniBertConfig(**config_kwargs, sparse_prediction=sparse)
        )
        outputs[sparse] = model.train()(**inputs)
    sparse_out, dense_out = outputs[True], outputs[False]
    logits = "prediction_logits" if head == "ForPreTraining" else "logits"
    assert dense_out.masked_positions is None
    positions = sparse_out.masked_positions
    assert (
        positions.dtype == torch.long and positions.tolist() == (labels.view(-1) != -100).nonzero().flatten().tolist()
    )
    sparse_predictions = sparse_out[logits].argmax(-1)
    dense_labelled = labels != -100
    dense_predictions = dense_out[logits][dense_labelled].argmax(-1)
    assert torch.equal(sparse_predictions, dense_predictions)
    sparse_hits = sparse_predictions == labels.view(-1)[positions]
    assert torch.equal(sparse_hits, dense_predictions == labels[dense_labelled])
    torch.testing.assert_close(sparse_out.loss, dense_out.loss)
    if head == "ForPreTraining":
        assert isinstance(sparse_out, transformers.models.bert.modeling_bert.BertForPreTrainingOutput)
        for out in (sparse_out, dense_out):
            torch.testing.assert_close(out.mlm_loss + out.next_sentence_loss, out.loss, rtol=0, atol=0)
        nsp = torch.nn.functional.cross_entropy(sparse_out.seq_relationship_logits, inputs["next_sentence_label"])
        torch.testing.assert_close(sparse_out.next_sentence_loss, nsp)
    else:
        assert isinstance(sparse_out, transformers.modeling_outputs.MaskedLMOutput)
    model.eval()
    with torch.no_grad():  # evaluation: full logits, so no positions, unless the caller asks for sparse ones
        assert model(**inputs).masked_positions is None
        asked = model(**inputs, sparse_prediction=True)
    assert torch.equal(asked.masked_positions, positions)
    torch.testing.assert_close(asked[logits], sparse_out[logits])
    with pytest.raises(ValueError, match=r"sparse_prediction=True needs labels"):
        model(inputs["input_ids"], sparse_prediction=True)


def test_pretraining_loss_parts_without_both_labels():
    """As in BERT, `loss` needs both labels; each part is there whenever its own label is."""
    _, mini = twin_models("ForPreTraining", TINY)
    inputs = head_inputs("ForPreTraining", TINY["vocab_size"])
    with torch.no_grad():
        mlm_only = mini(**{k: v for k, v in inputs.items() if k != "next_sentence_label"})
        nsp_only = mini(**{k: v for k, v in inputs.items() if k != "labels"})
        both = mini(**inputs)
    assert mlm_only.loss is None and mlm_only.next_sentence_loss is None
    torch.testing.assert_close(mlm_only.mlm_loss, both.mlm_loss)
    assert nsp_only.loss is None and nsp_only.mlm_loss is None
    torch.testing.assert_close(nsp_only.next_sentence_loss, both.next_sentence_loss)


def test_num_items_in_batch_from_trainer_sets_the_loss_denominator():
    _, mini = twin_models("ForMaskedLM", TINY)
    inputs = head_inputs("ForMaskedLM", TINY["vocab_size"])
    with torch.no_grad():
        mean_loss = mini(**inputs).loss
        summed = mini(**inputs, num_items_in_batch=torch.tensor(1)).loss
        n = int((inputs["labels"] != -100).sum())
    torch.testing.assert_close(summed, mean_loss * n)
    # The classification heads take it the same way (transformers' loss functions): the sum over labelled items
    # divided by num_items_in_batch.
    for head in ("ForSequenceClassification", "ForTokenClassification"):
        _, classifier = twin_models(head, TINY)
        inputs = head_inputs(head, TINY["vocab_size"])
        n = int((inputs["labels"] != -100).sum())
        with torch.no_grad():
            mean_loss = classifier(**inputs).loss
            summed = classifier(**inputs, num_items_in_batch=torch.tensor(1)).loss
        torch.testing.assert_close(summed, mean_loss * n, msg=head)


def test_gradient_checkpointing_gives_the_same_gradients():
    inputs = head_inputs("ForPreTraining", TINY["vocab_size"])
    grads = []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        model = modeling_minibert.MiniBertForPreTraining(MiniBertConfig(**TINY)).train()  # dropout replayed
        if checkpointing:
            model.activation_checkpointing_enable()
            assert model.is_activation_checkpointing
        model(**inputs).loss.backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) > 10
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], msg=name)


def test_cpu_dropout_drops_at_rate_p_independently_and_keeps_the_mean():
    p, n = 0.1, 2_000_000
    sigma = (p * (1 - p) / n) ** 0.5
    x = torch.ones(n, requires_grad=True)
    torch.manual_seed(0)
    out = functional_dropout(x, p, training=True)
    dropped = out.detach() == 0
    assert abs(dropped.float().mean() - p) < 5 * sigma
    for lane in range(4):  # the four numbers cut from each 64-bit draw are each uniform
        assert abs(dropped[lane::4].float().mean() - p) < 10 * sigma
    both = (dropped[0::2] & dropped[1::2]).float().mean()  # and independent of each other
    assert abs(both - p * p) < 5 * (p * p / (n / 2)) ** 0.5
    kept = out.detach()[~dropped]
    torch.testing.assert_close(kept, torch.full_like(kept, 2**15 / (2**15 - round(p * 2**15))))  # unbiased
    out.sum().backward()
    assert torch.equal(x.grad, out.detach())  # the gradient takes the same mask and scale

    torch.manual_seed(0)
    assert torch.equal(functional_dropout(x.detach(), p, training=True), out.detach())  # torch's seed governs it
    assert functional_dropout(x, p, training=False) is x


def test_attention_dropout_is_the_same_with_every_backend():
    """In CPU training the sdpa backend runs eager math, so the same seed gives the same dropout and loss."""
    inputs = head_inputs("ForPreTraining", TINY["vocab_size"])
    losses = []
    for attn in ("eager", "sdpa"):
        torch.manual_seed(0)
        config = MiniBertConfig(
            **TINY, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.5, attn_implementation=attn
        )
        model = modeling_minibert.MiniBertForPreTraining(config).train()
        losses.append(model(**inputs).loss)
        with torch.no_grad():
            assert not torch.equal(model(**inputs).loss, model.eval()(**inputs).loss)  # dropout did act
    assert torch.equal(losses[0], losses[1])


def test_mlm_decoder_is_tied_to_word_embeddings_unless_untied():
    tied = modeling_minibert.MiniBertForMaskedLM(MiniBertConfig(**TINY))
    assert tied.cls.predictions.decoder.weight is tied.bert.embeddings.word_embeddings.weight
    untied = modeling_minibert.MiniBertForPreTraining(MiniBertConfig(**TINY, tie_word_embeddings=False))
    assert untied.cls.predictions.decoder.weight is not untied.bert.embeddings.word_embeddings.weight


def test_guide_variant_is_expressible_and_has_its_parameter_count():
    """The Mini-BERT guide's model: ReLU FFN, a final LayerNorm, an untied single-projection MLM head (~4.5M)."""
    config = MiniBertConfig(
        hidden_act="relu", final_layer_norm=True, mlm_head_transform=False, tie_word_embeddings=False
    )
    model = modeling_minibert.MiniBertForMaskedLM(config)
    assert model.bert.encoder.LayerNorm is not None
    assert isinstance(model.cls.predictions.transform, torch.nn.Identity)
    count = sum(p.numel() for p in model.parameters())
    assert 4.45e6 < count < 4.55e6, count
    ids = torch.randint(5, 8192, (2, 64))
    with torch.no_grad():
        assert model(ids).logits.shape == (2, 64, 8192)


@pytest.mark.parametrize("head", HEADS)
def test_save_and_reload_every_head(head, tmp_path):
    """Weights come back bit for bit; outputs equal to float rounding (BLAS sums in an order that depends on how
    a weight is aligned in memory, and safetensors places tensors at 8-byte offsets only)."""
    _, mini = twin_models(head, TINY)
    inputs = {
        k: v for k, v in head_inputs(head, TINY["vocab_size"]).items() if "label" not in k and "positions" not in k
    }
    mini.save_pretrained(tmp_path)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == [
        "checks_minibert.py",
        "config.json",
        "configuration_minibert.py",
        "model.safetensors",
        "modeling_minibert.py",
    ]
    auto_class = next(a for a, m in AUTO_CLASSES.items() if m is type(mini))
    reloaded = auto_class.from_pretrained(tmp_path).eval()
    assert type(reloaded) is type(mini)
    saved, loaded = mini.state_dict(), reloaded.state_dict()
    assert saved.keys() == loaded.keys()
    for key, value in saved.items():
        assert torch.equal(value, loaded[key]), key
    with torch.no_grad():
        before, after = mini(**inputs), reloaded(**inputs)
    for key, value in before.items():
        torch.testing.assert_close(after[key], value, atol=1e-6, rtol=1e-6, msg=key)


@pytest.mark.slow(seconds=8)  # fresh processes: not in the quick tier
def test_saved_folder_loads_with_trust_remote_code_without_the_package(tmp_path):
    model = modeling_minibert.MiniBertForPreTraining(MiniBertConfig(**TINY)).eval()
    folder = tmp_path / "model"
    model.save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    assert set(config["auto_map"]) == {"AutoConfig"} | {auto.__name__ for auto in AUTO_CLASSES}
    ids, mask, types = padded_batch(TINY["vocab_size"])
    with torch.no_grad():
        expected_hidden = model.bert(ids, attention_mask=mask, token_type_ids=types).last_hidden_state
        expected_mlm = model(ids, attention_mask=mask, token_type_ids=types).prediction_logits
    code = f"""
import json, torch
from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM, AutoModelForPreTraining, AutoModelForQuestionAnswering
folder = {str(folder)!r}
ids, mask, types = (torch.tensor(x) for x in {json.dumps([ids.tolist(), mask.tolist(), types.tolist()])})
config = AutoConfig.from_pretrained(folder, trust_remote_code=True)
assert type(config).__name__ == "MiniBertConfig", type(config)
out = {{}}
with torch.no_grad():
    for auto in (AutoModel, AutoModelForMaskedLM, AutoModelForPreTraining, AutoModelForQuestionAnswering):
        model = auto.from_pretrained(folder, trust_remote_code=True).eval()
        assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
        result = model(ids, attention_mask=mask, token_type_ids=types)
        out[type(model).__name__] = result[0].tolist()
    try:  # the input checks travelled too: an id past the vocabulary is named, not an index error
        model(ids + {TINY["vocab_size"]})
    except ValueError as err:
        out["error"] = str(err)
checks = [m for m in sys.modules if m.startswith("transformers_modules") and m.endswith("checks_minibert")]
assert checks and sys.modules[checks[0]].__file__.startswith(os.environ["HF_HOME"]), checks
print(json.dumps(out))
"""
    code = "import os, sys\n" + code
    out = json.loads(run_python(code, cwd=tmp_path, HF_HOME=str(tmp_path / "hf")).strip().splitlines()[-1])
    assert re.fullmatch(r"input_ids contains \d+, outside \[0, vocab_size=120\)", out.pop("error"))
    assert set(out) == {
        "MiniBertModel",
        "MiniBertForMaskedLM",
        "MiniBertForPreTraining",
        "MiniBertForQuestionAnswering",
    }
    keep = mask.bool()
    torch.testing.assert_close(torch.tensor(out["MiniBertModel"])[keep], expected_hidden[keep])
    torch.testing.assert_close(torch.tensor(out["MiniBertForMaskedLM"])[keep], expected_mlm[keep])
    torch.testing.assert_close(torch.tensor(out["MiniBertForPreTraining"])[keep], expected_mlm[keep])


def test_truncated_weights_are_reported_with_the_file(tmp_path):
    modeling_minibert.MiniBertModel(MiniBertConfig(**TINY)).save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(
        ValueError, match=r"model.safetensors has \d+ bytes, its header says \d+ \(truncated or corrupted\)"
    ):
        AutoModel.from_pretrained(tmp_path)
    weights.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00not json")
    with pytest.raises(ValueError, match=str(weights)):
        AutoModel.from_pretrained(tmp_path)


def test_pickle_weights_are_refused_unless_asked(tmp_path):
    model = modeling_minibert.MiniBertForMaskedLM(MiniBertConfig(**TINY))
    model.config.save_pretrained(tmp_path)
    torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")
    with pytest.raises(ValueError, match=r"holds only pickle weights \(pytorch_model.bin\)"):
        AutoModelForMaskedLM.from_pretrained(tmp_path)
    loaded = AutoModelForMaskedLM.from_pretrained(tmp_path, use_safetensors=False)
    assert torch.equal(loaded.cls.predictions.bias, model.cls.predictions.bias)


def test_a_folder_of_another_model_type_is_refused_naming_config_json(tmp_path):
    # (A BERT folder loads: tests/sharing/test_convert_bert.py.)
    transformers.RobertaModel(transformers.RobertaConfig(**TINY)).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"config.json in .* has model_type 'roberta', expected 'minibert' or 'bert'"):
        modeling_minibert.MiniBertModel.from_pretrained(tmp_path)


@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda i: i.update(input_ids=i["input_ids"].masked_fill(i["input_ids"] == i["input_ids"][0, 0], 120)),
            r"input_ids contains 120, outside \[0, vocab_size=120\)",
        ),
        (
            lambda i: i.update(input_ids=i["input_ids"] - 100),
            r"input_ids contains -\d+, outside \[0, vocab_size=120\)",
        ),
        (
            lambda i: i.update(token_type_ids=i["token_type_ids"] * 2),
            r"token_type_ids contains 2, outside \[0, type_vocab_size=2\)",
        ),
        (
            lambda i: i.update(attention_mask=i["attention_mask"][:, :-1]),
            r"attention_mask has shape \(3, 11\) but input_ids has shape \(3, 12\)",
        ),
        (
            lambda i: i.update(token_type_ids=i["token_type_ids"][:2]),
            r"token_type_ids has shape \(2, 12\) but input_ids has shape \(3, 12\)",
        ),
        (
            lambda i: i.update({k: torch.cat([v, v, v], dim=1) for k, v in i.items()}),
            r"sequence length 36 exceeds max_position_embeddings=24",
        ),
    ],
)
def test_bad_input_raises_value_error_naming_value_and_limit(change, message):
    model = modeling_minibert.MiniBertForMaskedLM(MiniBertConfig(**TINY)).eval()
    ids, mask, types = padded_batch(TINY["vocab_size"])
    inputs = dict(input_ids=ids, attention_mask=mask, token_type_ids=types)
    model(**{k: torch.cat([v, v], dim=1) for k, v in inputs.items()})  # exactly at the length limit: fine
    change(inputs)
    with pytest.raises(ValueError, match=message):
        model(**inputs)


def test_torch_compile_gives_the_same_outputs():
    """One graph for inference (no breaks), and the same training loss and gradients when compiled.

    The aot_eager backend traces exactly what inductor would compile, without minutes of C++ builds;
    benchmarks/bench_model.py --compile measures inductor itself."""
    model = modeling_minibert.MiniBertForMaskedLM(
        MiniBertConfig(**TINY, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    )
    inputs = head_inputs("ForMaskedLM", TINY["vocab_size"])
    keep = inputs["attention_mask"].bool()
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    with torch.no_grad():
        features = {k: v for k, v in inputs.items() if k != "labels"}
        torch.testing.assert_close(compiled.eval()(**features).logits[keep], model.eval()(**features).logits[keep])

    eager_loss = model.train()(**inputs).loss
    eager_loss.backward()
    eager_grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    compiled_loss = torch.compile(model, backend="aot_eager")(**inputs).loss
    compiled_loss.backward()
    torch.testing.assert_close(compiled_loss, eager_loss)
    for name, grad in eager_grads.items():
        torch.testing.assert_close(model.get_parameter(name).grad, grad, atol=1e-5, rtol=1e-4, msg=name)


def test_float_masks_are_taken_as_bert_takes_them():
    """1.0/0.0 masks, as many users build them, give the same outputs as integer masks and as BERT, on the
    unpadded and the padded path."""
    for unpad in (True, False):
        bert, mini = twin_models("ForMaskedLM", TINY, unpad=unpad)
        ids, mask, types = padded_batch(TINY["vocab_size"])
        with torch.no_grad():
            expected = bert(ids, attention_mask=mask.float(), token_type_ids=types).logits
            for dtype in (torch.float32, torch.float16, torch.bool, torch.int32):
                got = mini(ids, attention_mask=mask.to(dtype), token_type_ids=types).logits
                keep = mask.bool()
                torch.testing.assert_close(got[keep], expected[keep], atol=1e-5, rtol=1e-4, msg=f"{dtype}")


@pytest.mark.parametrize("value", [2, 0.5, -1, -10000.0])
def test_non_binary_masks_are_refused_early(value):
    """BERT casts the mask to bool (nonzero = attend), which silently inverts an additive mask (0 / -10000);
    Mini-BERT names the value instead."""
    model = modeling_minibert.MiniBertForMaskedLM(MiniBertConfig(**TINY)).eval()
    ids, mask, types = padded_batch(TINY["vocab_size"])
    bad = mask.float().masked_fill(mask == 0, value) if value < 0 else mask.float().masked_fill(mask == 1, value)
    with pytest.raises(ValueError, match=rf"attention_mask contains {value}.*only 1 \(attend\) and 0 \(padding\)"):
        model(ids, attention_mask=bad, token_type_ids=types)


def saved_folder(tmp_path, head: str = "ForMaskedLM", **config_kwargs):
    folder = tmp_path / "model"
    getattr(modeling_minibert, f"MiniBert{head}")(MiniBertConfig(**{**TINY, **config_kwargs})).save_pretrained(folder)
    return folder


@pytest.mark.parametrize(
    "change, message",
    [
        (
            dict(vocab_size=2**20),
            r"config.json says vocab_size=1048576 but the weights in model.safetensors have "
            r"vocab_size=120 \(embeddings.word_embeddings.weight has shape \[120, 32\]\)",
        ),
        (dict(vocab_size=10**12), r"vocab_size=1000000000000 is above the limit of 1048576"),
        (dict(hidden_size=64), r"says hidden_size=64 but the weights in model.safetensors have hidden_size=32"),
        (
            dict(max_position_embeddings=512),
            r"says max_position_embeddings=512 but .* have max_position_embeddings=24",
        ),
        (dict(intermediate_size=128), r"says intermediate_size=128 but .* have intermediate_size=64"),
        (dict(num_hidden_layers=3), r"says num_hidden_layers=3 but the weights hold 2 layers"),
    ],
)
def test_config_that_disagrees_with_its_weights_is_refused_before_allocating(tmp_path, change, message, monkeypatch):
    folder = saved_folder(tmp_path)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **change}))

    def no_model(*args, **kwargs):
        raise AssertionError("a model was built before the check")

    monkeypatch.setattr(modeling_minibert.modeling_minibert.MiniBertEmbeddings, "__init__", no_model)
    for load in (AutoModelForMaskedLM.from_pretrained, AutoModel.from_pretrained):
        with pytest.raises(ValueError, match=message):
            load(folder)


def test_folder_without_weights_or_that_does_not_exist_is_named(tmp_path):
    folder = saved_folder(tmp_path)
    (folder / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match=r"model holds no model weights \(no model.safetensors\)"):
        AutoModel.from_pretrained(folder)
    for missing in (tmp_path / "nowhere", "./nowhere", "runs/nowhere/model"):
        with pytest.raises(FileNotFoundError, match=rf"model folder {re.escape(str(missing))} does not exist"):
            modeling_minibert.MiniBertForMaskedLM.from_pretrained(missing)
        with pytest.raises(FileNotFoundError, match=r"does not exist"):
            MiniBertConfig.from_pretrained(missing)
    check_model_path("alice/model")  # could be a Hub repo: left to the Hub to answer


def pre_ln_reference(model: modeling_minibert.MiniBertModel, ids: torch.Tensor) -> torch.Tensor:
    """Pre-LN written out from its definition, reading the model's parameters: x + Attn(LN(x)), then
    x + FFN(LN(x)) per block, and a final LayerNorm."""
    nh = model.config.num_attention_heads
    positions = torch.arange(ids.shape[1]).expand_as(ids)
    h = model.embeddings(ids, torch.zeros_like(ids), positions)
    for layer in model.encoder.layer:
        attention = layer.attention.self
        x = layer.attention.output.LayerNorm(h)
        q, k, v = (
            proj(x).unflatten(-1, (nh, -1)).transpose(1, 2)
            for proj in (attention.query, attention.key, attention.value)
        )
        context = torch.nn.functional.scaled_dot_product_attention(q, k, v).transpose(1, 2).flatten(2)
        h = h + layer.attention.output.dense(context)
        x = layer.output.LayerNorm(h)
        h = h + layer.output.dense(torch.nn.functional.gelu(layer.intermediate.dense(x)))
    return model.encoder.LayerNorm(h)


def test_pre_layer_norm_is_the_pre_ln_block_with_berts_parameter_names():
    config = MiniBertConfig(**TINY, layer_norm_position="pre")
    model = modeling_minibert.MiniBertModel(config).eval()
    post = modeling_minibert.MiniBertModel(MiniBertConfig(**TINY, final_layer_norm=True))
    assert model.state_dict().keys() == post.state_dict().keys()  # same names, used in other places
    ids, mask, types = padded_batch(TINY["vocab_size"])
    with torch.no_grad():
        for parameter in model.parameters():  # away from the init (LayerNorms at 1 and 0), so every wire shows
            parameter.add_(0.3 * torch.randn_like(parameter))
        full = model(ids).last_hidden_state
        torch.testing.assert_close(full, pre_ln_reference(model, ids), atol=1e-5, rtol=1e-4)
        post.load_state_dict(model.state_dict())
        assert not torch.allclose(
            full, post.eval()(ids).last_hidden_state, atol=1e-2
        )  # the same weights, wired otherwise
        unpadded = model(ids, attention_mask=mask, token_type_ids=types).last_hidden_state
        padded = model(ids, attention_mask=mask, token_type_ids=types, unpad_inputs=False).last_hidden_state
    keep = mask.bool()
    torch.testing.assert_close(unpadded[keep], padded[keep], atol=1e-5, rtol=1e-4)


def test_pre_layer_norm_trains_and_reloads(tmp_path):
    torch.manual_seed(0)
    config = MiniBertConfig(
        **TINY, layer_norm_position="pre", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0
    )
    model = modeling_minibert.MiniBertForPreTraining(config).train()
    inputs = head_inputs("ForPreTraining", TINY["vocab_size"])
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(30):
        loss = model(**inputs).loss
        losses.append(loss.item())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    assert losses[-1] < 0.3 * losses[0], losses

    model.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["layer_norm_position"] == "pre"
    reloaded = AutoModelForMaskedLM.from_pretrained(tmp_path).eval()
    assert reloaded.config.layer_norm_position == "pre" and reloaded.bert.encoder.LayerNorm is not None
    features = {k: v for k, v in inputs.items() if k in ("input_ids", "attention_mask", "token_type_ids")}
    with torch.no_grad():
        expected = model.eval()(**features).prediction_logits
        got = reloaded(**features).logits
    keep = features["attention_mask"].bool()
    torch.testing.assert_close(got[keep], expected[keep], atol=1e-6, rtol=1e-6)


# --- found by mutation testing (benchmarks/mutation.py): behaviour no other test looked at ------------------------


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_attention_dropout_is_off_in_eval_mode(attn):
    # With a high attention dropout, eval outputs are deterministic and those of the same weights without dropout.
    inputs = head_inputs("ForPreTraining", TINY["vocab_size"])
    torch.manual_seed(0)
    config = MiniBertConfig(
        **TINY, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.5, attn_implementation=attn
    )
    model = modeling_minibert.MiniBertForPreTraining(config).eval()
    no_dropout = modeling_minibert.MiniBertForPreTraining(
        MiniBertConfig(**TINY, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, attn_implementation=attn)
    ).eval()
    no_dropout.load_state_dict(model.state_dict())
    with torch.no_grad():
        first, second, reference = model(**inputs).loss, model(**inputs).loss, no_dropout(**inputs).loss
    assert torch.equal(first, second)
    assert torch.equal(first, reference)


def test_save_pretrained_creates_missing_parent_folders(tmp_path):
    model = modeling_minibert.MiniBertForMaskedLM(MiniBertConfig(**TINY))
    folder = tmp_path / "runs" / "today" / "model"
    model.save_pretrained(folder)
    assert {"config.json", "model.safetensors"} <= {p.name for p in folder.iterdir()}
    loaded = AutoModelForMaskedLM.from_pretrained(folder)
    assert torch.equal(loaded.cls.predictions.bias, model.cls.predictions.bias)


def test_layer_count_error_names_the_config_file(tmp_path):
    folder = saved_folder(tmp_path)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 3}))
    with pytest.raises(ValueError, match=rf"^{re.escape(str(folder / 'config.json'))} says num_hidden_layers=3 "):
        AutoModelForMaskedLM.from_pretrained(folder)


def test_pickle_weights_error_names_every_pickle_file(tmp_path):
    model = modeling_minibert.MiniBertForMaskedLM(MiniBertConfig(**TINY))
    model.config.save_pretrained(tmp_path)
    torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")
    torch.save(model.state_dict(), tmp_path / "training_args.bin")
    with pytest.raises(ValueError, match=r"holds only pickle weights \(pytorch_model.bin, training_args.bin\)"):
        AutoModelForMaskedLM.from_pretrained(tmp_path)


@pytest.mark.parametrize("unpad_inputs", [True, False])
def test_eval_mode_gives_the_attention_backend_no_dropout_and_the_callers_kwargs(monkeypatch, unpad_inputs):
    # On CPU, eager attention also checks `module.training`, so only the backend's arguments show that evaluation
    # asks for no dropout (on GPU, sdpa would apply whatever it is given), and that the caller's extra keyword
    # arguments reach the attention function, as in transformers' models.
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    calls = []
    sdpa = ALL_ATTENTION_FUNCTIONS["sdpa"]

    def spy(module, query, key, value, attention_mask, **kwargs):
        calls.append(kwargs)
        return sdpa(module, query, key, value, attention_mask, **{k: v for k, v in kwargs.items() if k != "probe"})

    monkeypatch.setitem(ALL_ATTENTION_FUNCTIONS, "sdpa", spy)
    config = MiniBertConfig(
        **TINY, attention_probs_dropout_prob=0.5, attn_implementation="sdpa", unpad_inputs=unpad_inputs
    )
    model = modeling_minibert.MiniBertModel(config).eval()
    inputs = head_inputs("ForPreTraining", TINY["vocab_size"])
    with torch.no_grad():  # packed (unpadded) attention runs bucket by bucket: one call per bucket and layer
        model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"], probe="seen")
    assert len(calls) >= TINY["num_hidden_layers"]
    assert all(call["dropout"] == 0.0 and call["probe"] == "seen" for call in calls)


def test_from_pretrained_passes_model_arguments_to_the_model(tmp_path):
    # As in transformers: positional arguments after the path go to the model's __init__ (here add_pooling_layer).
    modeling_minibert.MiniBertModel(MiniBertConfig(**TINY)).save_pretrained(tmp_path)
    assert modeling_minibert.MiniBertModel.from_pretrained(tmp_path, False).pooler is None
    assert modeling_minibert.MiniBertModel.from_pretrained(tmp_path).pooler is not None


def test_masked_lm_loads_a_pretraining_folder_without_a_load_report(tmp_path, capfd):
    """The pooler and NSP head of a pretraining folder are expected leftovers for the MLM head: no report, and
    the shared weights arrive intact."""
    config = MiniBertConfig(
        vocab_size=64,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
    )
    pretrained = MiniBertForPreTraining(config)
    pretrained.save_pretrained(tmp_path)
    capfd.readouterr()
    model, info = MiniBertForMaskedLM.from_pretrained(tmp_path, output_loading_info=True)
    assert info["unexpected_keys"] == set() and info["missing_keys"] == set()
    printed = "".join(capfd.readouterr())
    assert "UNEXPECTED" not in printed and "seq_relationship" not in printed
    torch.testing.assert_close(
        model.cls.predictions.transform.dense.weight, pretrained.cls.predictions.transform.dense.weight
    )


# --- the checks that travel with the model (checks_minibert.py) -----------------------------------------------


def test_input_checks_read_no_device_values_in_training():
    """In training on an accelerator the checks queue device-side asserts instead of reading values back (one host
    sync per forward). Meta tensors stand in for device data: they have no values, so any read (`.item()`,
    `.tolist()`, `bool()`, boolean indexing) raises. In evaluation the checks do read, and name the bad value."""
    config = MiniBertConfig(**TINY)
    ids, mask, types = (t.to("meta") for t in padded_batch(TINY["vocab_size"]))
    inputs = (ids, mask.float(), types, torch.arange(12, device="meta"), None)
    check_inputs(config, *inputs, training=True)
    check_labels("labels", ids, TINY["vocab_size"], "vocab_size", training=True)
    for check in (
        lambda: check_inputs(config, *inputs, training=False),
        lambda: check_labels("labels", ids, TINY["vocab_size"], "vocab_size", training=False),
    ):
        with pytest.raises((RuntimeError, NotImplementedError), match="meta"):
            check()


def test_training_on_the_cpu_still_names_bad_ids_and_the_device_path_names_the_limit(monkeypatch):
    """The CPU has no device to wait for: training there keeps the one-line ValueError. The asynchronous path
    (forced here on the CPU, where torch evaluates the assert at once) names the argument and the limit."""
    model = MiniBertForMaskedLM(MiniBertConfig(**TINY)).train()
    ids, mask, types = padded_batch(TINY["vocab_size"])
    labels = ids.masked_fill(mask == 0, -100)
    with pytest.raises(ValueError, match=r"input_ids contains 120, outside \[0, vocab_size=120\)"):
        model(ids.masked_fill(ids == ids[0, 0], 120), attention_mask=mask)
    with pytest.raises(ValueError, match=r"labels contains 120, outside \[0, vocab_size=120\) \(-100 marks ignored"):
        model(ids, attention_mask=mask, labels=labels.masked_fill(labels == ids[0, 0], 120))
    monkeypatch.setattr(checks_minibert, "read_on_host", lambda tensor, training: not training)
    model(ids, attention_mask=mask, token_type_ids=types, labels=labels)  # good input passes the device checks
    for bad, message in (
        (dict(input_ids=ids + 120), r"input_ids holds a value outside \[0, vocab_size=120\)"),
        (dict(token_type_ids=types + 1), r"token_type_ids holds a value outside \[0, type_vocab_size=2\)"),
        (dict(attention_mask=mask * 2), r"attention_mask holds a value other than 0 and 1"),
        (
            dict(labels=labels.masked_fill(labels == ids[0, 0], 120)),
            r"labels holds a value outside \[0, vocab_size=120\)",
        ),
    ):
        with pytest.raises(RuntimeError, match=message):
            model(**{**dict(input_ids=ids, attention_mask=mask, token_type_ids=types), **bad})


def test_the_safetensors_header_reader_agrees_with_safetensors_and_names_what_is_wrong(tmp_path):
    from safetensors import safe_open

    folder = saved_folder(tmp_path)
    path = folder / "model.safetensors"
    header = read_safetensors_header(path)
    with safe_open(path, framework="pt") as f:
        expected = {key: (str(f.get_slice(key).get_dtype()), list(f.get_slice(key).get_shape())) for key in f.keys()}
    assert {k: (v["dtype"], v["shape"]) for k, v in header.items() if k != "__metadata__"} == expected
    good = path.read_bytes()
    length = int.from_bytes(good[:8], "little")

    def with_header(edit) -> bytes:
        changed = json.loads(good[8 : 8 + length])
        edit(changed)
        raw = json.dumps(changed).encode()
        return len(raw).to_bytes(8, "little") + raw + good[8 + length :]

    word = "bert.embeddings.word_embeddings.weight"
    path.write_bytes(good[:-1])
    with pytest.raises(
        ValueError,
        match=rf"^{re.escape(str(path))} has {len(good) - 1} bytes, its header says "
        rf"{len(good)} \(truncated or corrupted\)$",
    ):
        read_safetensors_header(path)
    assert (
        outputs.safetensors_problem(path)
        == f"model.safetensors has {len(good) - 1} bytes, its header says {len(good)} (truncated or corrupted)"
    )
    for content, message in (
        (good[:5], r"it has 5 bytes, too few for its header"),
        (b"\x08" + bytes(7) + b"not json", r"Expecting value"),
        (with_header(lambda h: h[word].update(dtype="Q9")), rf"{word} has the unknown dtype 'Q9'"),
        (
            with_header(lambda h: h[word].update(shape=[121, 32])),
            rf"{word}'s data_offsets .* do not hold F32 of shape \[121, 32\]",
        ),
        (with_header(lambda h: h.update({"x": 3})), r"the header entry of x is malformed: 3"),
    ):
        path.write_bytes(content)
        with pytest.raises(ValueError, match=rf"^{re.escape(str(path))} is truncated or corrupted: {message}"):
            read_safetensors_header(path)
        assert outputs.safetensors_problem(path).startswith("model.safetensors is truncated or corrupted: ")
    path.unlink()
    assert outputs.safetensors_problem(path) == "no model.safetensors"


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8, torch.bool])
def test_weights_stored_as_integers_are_refused_naming_the_tensor_and_dtype(tmp_path, dtype):
    from safetensors.torch import save_file

    folder = saved_folder(tmp_path)
    model = MiniBertForMaskedLM.from_pretrained(folder)
    state = {k: v.contiguous() for k, v in model.state_dict().items() if k != "cls.predictions.decoder.weight"}
    state["bert.embeddings.word_embeddings.weight"] = state["bert.embeddings.word_embeddings.weight"].to(dtype)
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    stored = read_safetensors_header(folder / "model.safetensors")["bert.embeddings.word_embeddings.weight"]["dtype"]
    with pytest.raises(
        ValueError,
        match=rf"holds embeddings.word_embeddings.weight as {stored}; Mini-BERT's weights "
        r"must be floating point \(F32, F16, BF16, F64\)",
    ):
        AutoModelForMaskedLM.from_pretrained(folder)


def test_half_precision_weights_still_load(tmp_path):
    folder = saved_folder(tmp_path)
    MiniBertForMaskedLM.from_pretrained(folder).half().save_pretrained(folder)
    assert (
        read_safetensors_header(folder / "model.safetensors")["bert.embeddings.word_embeddings.weight"]["dtype"]
        == "F16"
    )
    assert AutoModelForMaskedLM.from_pretrained(folder, dtype=torch.float32).dtype == torch.float32


@pytest.mark.parametrize("head", HEADS)
def test_autocast_gives_every_output_in_berts_dtype_and_close_to_its_values(head):
    """Under `torch.autocast("cpu", torch.bfloat16)` BERT's logits come out bf16 (its last op is a Linear) and its
    hidden states float32 (residual sums promote): Mini-BERT's the same, and as close to BERT's as bf16 allows."""
    bert, mini = twin_models(head, TINY)
    inputs = head_inputs(head, TINY["vocab_size"])
    with torch.no_grad(), torch.autocast("cpu", torch.bfloat16):
        expected, got = bert(**inputs, output_hidden_states=True), mini(**inputs, output_hidden_states=True)
    mask = inputs["attention_mask"].flatten(0, -2).bool()
    for key, value in expected.items():
        for e, g in zip(*((v,) if torch.is_tensor(v) else v for v in (value, got[key]))):
            assert g.dtype == e.dtype, f"{key}: {g.dtype}, BERT {e.dtype}"
            if e.dim() >= 2 and e.shape[:2] == mask.shape:
                e, g = e[mask], g[mask]
            torch.testing.assert_close(g.float(), e.float(), atol=0.1, rtol=0.05, msg=key)
