"""The checks that stop a job whose weights, losses or targets become NaN or infinite, without training: the
shared pieces (`utils/finite.py`), Trainer's callback (`finetuning/finite.py`) and pretraining's checks
(`pretraining/finite.py`), distributed runs included. The jobs themselves are run into non-finite values in
tests/cross_cutting/test_faults.py (`TestNoNonFiniteSuccess`) and beside each job's tests."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from transformers import TrainerControl, TrainerState, TrainingArguments

import modeling_minibert.training.pretraining.finite as pretraining_finite
from modeling_minibert.training.finetuning.arguments import training_arguments
from modeling_minibert.training.finetuning.finite import StopOnNonFinite, check_results
from modeling_minibert.utils.finite import (
    NonFiniteError,
    non_finite_names,
    non_finite_rows,
    non_finite_values,
    weights_problem,
)


def model_with(**values: float) -> torch.nn.Module:
    """Two linear layers and an integer buffer; `values` sets one entry of the named parameters."""
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 2))
    model.register_buffer("ids", torch.arange(4))
    with torch.no_grad():
        for name, value in values.items():
            model.get_parameter(name.replace("_", ".")).view(-1)[0] = value
    return model


def test_the_error_is_one_line_for_the_command_line_and_a_floating_point_error_in_python():
    assert issubclass(NonFiniteError, ValueError) and issubclass(NonFiniteError, FloatingPointError)


def test_non_finite_tensors_are_named_and_integer_ones_skipped():
    model = model_with(**{"1_weight": float("nan"), "0_bias": float("-inf")})
    bad, total = non_finite_names([*model.named_parameters(), *model.named_buffers()])
    assert (bad, total) == (["0.bias", "1.weight"], 4)  # the integer buffer is not looked at
    assert weights_problem(model) == "2 of 4 tensors, the first: 0.bias"
    assert weights_problem(model_with()) is None


def test_non_finite_rows_of_a_list_or_a_tensor_and_values():
    rows = [torch.zeros(2), torch.tensor([1.0, float("inf")]), torch.tensor([float("nan"), 0.0])]
    assert non_finite_rows(rows) == (2, 3, 1)
    assert non_finite_rows(torch.stack(rows)) == (2, 3, 1)
    assert non_finite_rows([]) == (0, 0, None) and non_finite_rows(torch.zeros(0, 2)) == (0, 0, None)
    assert list(non_finite_values({"loss": math.nan, "step": 3, "ok": True, "lr": 1e-3})) == ["loss"]
    assert non_finite_values({"loss": math.inf, "eval_loss": 0.5, "name": "x"}) == {"loss": math.inf}
    assert non_finite_values({"loss": math.inf, "eval_loss": math.nan}, ["eval_loss"]).keys() == {"eval_loss"}


def test_the_nan_filter_is_off_unless_asked_for(tmp_path):
    """Trainer's filter reports a NaN step's loss as the others' average (an all-NaN run: train_loss 0.0)."""
    assert training_arguments(str(tmp_path), False, "loss").logging_nan_inf_filter is False
    assert training_arguments(str(tmp_path), False, "loss", logging_nan_inf_filter=True).logging_nan_inf_filter is True


def trainer_args(output: Path, learning_rate: float = 1e12) -> TrainingArguments:
    return TrainingArguments(output_dir=str(output), learning_rate=learning_rate, use_cpu=True, report_to="none")


@pytest.mark.parametrize(
    "hook, kwargs, message",
    [
        ("on_log", {"logs": {"loss": math.nan, "grad_norm": math.inf}}, "the training loss is nan at step 7"),
        ("on_log", {"logs": {"train_loss": math.inf}}, "the training loss is inf at step 7"),
        ("on_log", {"logs": {"eval_loss": math.nan, "eval_accuracy": 0.5}}, "the validation loss is nan at step 7"),
        (
            "on_step_end",
            {"model": model_with(**{"1_weight": math.nan})},
            r"the weights are not finite at step 7 \(1 of 4 tensors, the first: 1.weight\)",
        ),
        (
            "on_epoch_end",
            {"model": model_with(**{"0_bias": math.inf})},
            r"the weights are not finite at step 7 \(1 of 4 tensors, the first: 0.bias\)",
        ),
    ],
    ids=["loss", "train_loss", "eval_loss", "weights-before-a-save", "weights-before-an-epochs-save"],
)
def test_the_callback_stops_trainer_naming_the_step_the_cause_and_the_checkpoint(hook, kwargs, message, tmp_path):
    (tmp_path / "checkpoint-5").mkdir()  # unfinished (no trainer_state.json): not named as the one to keep
    state, control = TrainerState(global_step=7), TrainerControl(should_save=True)
    with (
        pytest.warns(UserWarning, match="skipping the unfinished checkpoint"),
        pytest.raises(
            NonFiniteError,
            match=rf"^{message}: the learning rate 1e\+12 is likely too high \(lower "
            r"--learning_rate\); nothing was saved as the model, and no checkpoint "
            r"before this step$",
        ),
    ):
        getattr(StopOnNonFinite(), hook)(trainer_args(tmp_path), state, control, **kwargs)


def test_the_callback_lets_finite_runs_and_steps_without_a_save_go_on(tmp_path):
    callback, state, args = StopOnNonFinite(), TrainerState(global_step=3), trainer_args(tmp_path)
    callback.on_train_begin(args, state, TrainerControl(), model=model_with())
    callback.on_log(args, state, TrainerControl(), logs={"loss": 0.7, "grad_norm": math.inf, "learning_rate": 1e-3})
    # No save now: the weights are not read (a NaN is found at the next save, or by the logged loss).
    callback.on_step_end(args, state, TrainerControl(should_save=False), model=model_with(**{"0_weight": math.nan}))
    check_results(
        model_with(), {"train": {"train_loss": 0.5}, "eval": {"eval_loss": 0.4, "eval_f1": math.nan}}, args, 3
    )


def test_a_broken_starting_model_and_non_finite_final_results_are_refused(tmp_path):
    args = trainer_args(tmp_path)
    with pytest.raises(
        NonFiniteError,
        match=r"^the model to train has non-finite weights before step 1 \(1 of 4 "
        r"tensors, the first: 0.weight\): the model it starts from is broken",
    ):
        StopOnNonFinite().on_train_begin(
            args, TrainerState(), TrainerControl(), model=model_with(**{"0_weight": math.inf})
        )
    with pytest.raises(NonFiniteError, match="^the test loss is nan for the final model at step 4: the learning rate"):
        check_results(model_with(), {"train": {"train_loss": 0.5}, "test": {"test_loss": math.nan}}, args, 4)


class FakeAccelerator:
    """What `check_weights` asks of Accelerate: the process count, and a sum over the processes (here: this
    process's count plus `others`, as the other processes would add theirs)."""

    def __init__(self, processes: int, others: float):
        self.num_processes, self.others, self.device = processes, others, torch.device("cpu")

    def reduce(self, tensor: torch.Tensor, reduction: str) -> torch.Tensor:
        assert reduction == "sum"
        return tensor + self.others


def pretraining_run(tmp_path: Path, processes: int = 1, others: float = 0.0) -> SimpleNamespace:
    return SimpleNamespace(
        out=tmp_path, args=SimpleNamespace(learning_rate=0.5), accelerator=FakeAccelerator(processes, others)
    )


def test_pretraining_stops_on_every_process_when_one_holds_a_non_finite_shard(tmp_path):
    """FSDP shards the weights: a process whose own shard is finite must stop with the one that is not."""
    good = model_with()
    pretraining_finite.check_weights(pretraining_run(tmp_path, 2, others=0), good, 4)
    with pytest.raises(
        NonFiniteError,
        match=r"^the weights are not finite on another process at step 4: the learning "
        r"rate 0.5 is likely too high",
    ):
        pretraining_finite.check_weights(pretraining_run(tmp_path, 2, others=3), good, 4)
    with pytest.raises(
        NonFiniteError,
        match=r"^the weights are not finite at step 4 \(1 of 4 tensors, the first: "
        r"1.bias\)",
    ):
        pretraining_finite.check_weights(pretraining_run(tmp_path), model_with(**{"1_bias": math.nan}), 4)


def test_pretraining_records_and_teachers_are_checked(tmp_path):
    run = pretraining_run(tmp_path)
    pretraining_finite.check_record(run, {"step": 2, "loss": 3.1, "mlm_accuracy": math.nan})  # only losses
    with pytest.raises(NonFiniteError, match="^the held-out loss is inf at step 10: "):
        pretraining_finite.check_record(run, {"step": 10, "eval_loss": math.inf})
    with pytest.raises(NonFiniteError, match="^generator_loss is nan at step 3: "):
        pretraining_finite.check_record(run, {"step": 3, "loss": 1.0, "generator_loss": math.nan})
    teacher = SimpleNamespace(teacher=SimpleNamespace(name="the-teacher", model=model_with(**{"0_bias": math.nan})))
    with pytest.raises(
        NonFiniteError,
        match=r"^the teacher the-teacher has non-finite weights \(1 of 4 tensors, the "
        r"first: 0.bias\): a non-finite teacher cannot teach",
    ):
        pretraining_finite.check_teacher(teacher)
    pretraining_finite.check_teacher(SimpleNamespace())  # an objective without a teacher
    with pytest.raises(
        NonFiniteError,
        match=r"^the model to train has non-finite weights before step 1 .*the model it "
        r"starts from \(runs/base\) is broken",
    ):
        pretraining_finite.check_start(model_with(**{"0_weight": math.nan}), Path("runs/base"))
