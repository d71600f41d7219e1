"""ONNX export: dynamic axes, outputs equal to PyTorch under onnxruntime."""

import onnxruntime
import pytest
import torch
from conftest import TINY

from modeling_minibert import MiniBertConfig, MiniBertForPreTraining
from modeling_minibert.cli import main as cli_main
from modeling_minibert.export_onnx import example_inputs, export_onnx


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("model")
    torch.manual_seed(0)
    MiniBertForPreTraining(MiniBertConfig(**TINY)).save_pretrained(path)
    return path


def test_pretraining_heads_export_and_match_pytorch_on_new_shapes(folder, tmp_path):
    path = export_onnx(folder, tmp_path / "out" / "model.onnx")
    session = onnxruntime.InferenceSession(str(path))
    assert [i.name for i in session.get_inputs()] == ["input_ids", "attention_mask", "token_type_ids"]
    assert [o.name for o in session.get_outputs()] == ["prediction_logits", "seq_relationship_logits"]
    # The padded PyTorch path is compared everywhere, padding positions included.
    model = MiniBertForPreTraining.from_pretrained(folder, unpad_inputs=False).eval()
    for batch_size, seq_len in ((1, 5), (4, TINY["max_position_embeddings"])):
        ids, mask, types = example_inputs(model.config, batch_size, seq_len, None, seed=batch_size)
        got = session.run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy(), "token_type_ids": types.numpy()})
        with torch.no_grad():
            expected = model(ids, attention_mask=mask, token_type_ids=types)
        torch.testing.assert_close(torch.from_numpy(got[0]), expected.prediction_logits, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(torch.from_numpy(got[1]), expected.seq_relationship_logits, atol=1e-4, rtol=1e-4)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["model.onnx"]  # no staging leftovers


def test_cli_exports_the_base_model(folder, tmp_path, capsys):
    assert cli_main(["export-onnx", str(folder), str(tmp_path / "base.onnx"), "--head", "MiniBertModel"]) == 0
    assert "wrote" in capsys.readouterr().out
    session = onnxruntime.InferenceSession(str(tmp_path / "base.onnx"))
    assert [o.name for o in session.get_outputs()] == ["last_hidden_state", "pooler_output"]


def test_unknown_head_is_refused(folder, tmp_path):
    with pytest.raises(ValueError, match=r"unknown head 'BertModel'; choose one of MiniBertModel"):
        export_onnx(folder, tmp_path / "x.onnx", head="BertModel")
    assert not (tmp_path / "x.onnx").exists()
