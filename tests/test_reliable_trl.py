"""``Reliable`` and ``PreemptionCallback`` on TRL's own ``SFTTrainer``, ``DPOTrainer`` and ``GRPOTrainer``
(``tests/resume_script.py``'s ``trl_*`` runs: 6 optimizer steps of 2 micro-steps on the demo task, CPU).

- ``class T(Reliable, trl.XTrainer)``: a SIGKILL half-way through writing a checkpoint, and a SIGTERM mid-step, both
  resume to the uninterrupted run's later logs and final weights, exactly.
- ``trainer.add_callback(PreemptionCallback(trainer))`` on the unchanged TRL trainer: a SIGTERM saves, exits with 75
  and the run resumes to its end (SFT and DPO: exactly, but for TRL's ``num_tokens`` counter, which TRL's own resume
  restarts from 0).
- ``Reliable.compute_loss`` adds no host read (``.item()``, ``bool()``, ...) and no device sync per micro-step.
"""

from __future__ import annotations

import json
import os

import pytest
import torch
from test_resume import _assert_same_continuation, _launch

from trl_ext.reliability.preemption import PREEMPTED_EXIT_CODE, PREEMPTED_FILE, Preempted

TRAINERS = ["trl_sft", "trl_dpo", "trl_grpo"]
#: the checkpoint whose save the SIGKILL cuts, and the one the resume starts from (GRPO: saves every 3 steps)
CUT = {"trl_sft": (4, 2), "trl_dpo": (4, 2), "trl_grpo": (6, 3)}


class _one_thread_ctx:
    """The subprocess runs use one thread: the same reduction order, so bit-identical numbers."""

    def __enter__(self):
        self.threads = torch.get_num_threads()
        torch.set_num_threads(1)

    def __exit__(self, *exc):
        torch.set_num_threads(self.threads)


@pytest.fixture(autouse=True)
def _one_thread():
    with _one_thread_ctx():
        yield


def _run(algo: str, out, *callbacks, resume=None, callback_only: bool = False) -> dict:
    """Train in this process; the result as ``resume_script.py`` writes it (log history, final weights)."""
    from resume_script import build

    overrides = {"callback_only": True} if callback_only else {}
    trainer = build(algo, str(out), list(callbacks), **overrides)
    trainer.train(resume_from_checkpoint=resume)
    torch.save(trainer.model.state_dict(), os.path.join(out, "final_weights.pt"))
    return {"log_history": trainer.state.log_history, "step": trainer.state.global_step}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    runs = {}

    def get(algo: str):
        if algo not in runs:
            out = tmp_path_factory.mktemp(algo) / "full"
            with _one_thread_ctx():
                runs[algo] = (out, _run(algo, out))
        return runs[algo]

    return get


def _preempted_at(algo: str, out, step: int, callback_only: bool = False) -> Preempted:
    from resume_script import SignalAt

    with pytest.raises(Preempted) as info:
        _run(algo, out, SignalAt(step, 1), callback_only=callback_only)
    stop = info.value
    assert stop.code == PREEMPTED_EXIT_CODE and stop.step == step + 1
    assert json.loads((out / PREEMPTED_FILE).read_text())["checkpoint"] == str(out / f"checkpoint-{step + 1}")
    return stop


@pytest.mark.slow
@pytest.mark.parametrize("algo", TRAINERS)
def test_reliable_trl_trainer_killed_while_saving_resumes_exactly(tmp_path, uninterrupted, algo):
    full_dir, full = uninterrupted(algo)
    killed_dir = tmp_path / "killed"
    cut, resumed_from = CUT[algo]
    process = _launch(algo, killed_dir, "--kill-at", f"save:{cut}")
    assert process.wait(timeout=600) == -9, open(f"{killed_dir}.log").read()[-3000:]
    assert (killed_dir / ".incomplete" / f"checkpoint-{cut}").exists() and not (
        killed_dir / f"checkpoint-{cut}"
    ).exists()
    resumed = _run(algo, killed_dir, resume=True)
    assert resumed["step"] == 6
    _assert_same_continuation(full, resumed, full_dir, killed_dir, resumed_step=resumed_from)


@pytest.mark.slow
@pytest.mark.parametrize("algo", TRAINERS)
def test_reliable_trl_trainer_sigterm_saves_and_resumes_exactly(tmp_path, uninterrupted, algo):
    full_dir, full = uninterrupted(algo)
    out = tmp_path / "preempted"
    _preempted_at(algo, out, 2)  # SIGTERM during step 3: checkpoint-3, then exit 75
    assert (out / "checkpoint-3" / "trl_ext_checkpoint.json").exists()
    resumed = _run(algo, out, resume=True)
    _assert_same_continuation(full, resumed, full_dir, out, resumed_step=3)


@pytest.mark.slow
@pytest.mark.parametrize("algo", TRAINERS)
def test_preemption_callback_alone_saves_and_resumes(tmp_path, uninterrupted, algo):
    """The unchanged TRL trainer with only ``PreemptionCallback``: transformers' own checkpoint and resume."""
    out = tmp_path / "preempted"
    _preempted_at(algo, out, 2, callback_only=True)
    assert (out / "checkpoint-3" / "trainer_state.json").exists()
    assert not (out / "checkpoint-3" / "trl_ext_checkpoint.json").exists()  # not Reliable's save
    resumed = _run(algo, out, resume=str(out / "checkpoint-3"), callback_only=True)
    assert resumed["step"] == 6
    if algo != "trl_grpo":  # TRL's GRPOTrainer regenerates inside a generation block on resume: not exact
        full_dir, full = uninterrupted(algo)
        # TRL's num_tokens counter restarts from 0 on TRL's resume (Reliable restores it)
        _assert_same_continuation(full, resumed, full_dir, out, resumed_step=3, ignore=("num_tokens",))


# -- no host sync per micro-step -----------------------------------------------------------------------------------

_SYNCS = ["item", "tolist", "numpy", "cpu", "__bool__", "__float__", "__int__"]


def _count_syncs_in_compute_loss(base: type, monkeypatch, tmp_path) -> tuple[int, int]:
    """(host reads + device syncs inside ``compute_loss``, micro-steps) over 2 optimizer steps of 2 micro-steps."""
    import trl

    from trl_ext.demo import DemoModelConfig, DemoTaskConfig, build_model, build_tokenizer, make_problems

    counts = {"syncs": 0, "inside": 0, "calls": 0}

    class Counting(base):
        def compute_loss(self, *args, **kwargs):
            counts["inside"] += 1
            counts["calls"] += self.model.training
            try:
                return super().compute_loss(*args, **kwargs)
            finally:
                counts["inside"] -= 1

    def counted(original):
        def wrapper(*args, **kwargs):
            counts["syncs"] += counts["inside"] > 0
            return original(*args, **kwargs)

        return wrapper

    for name in _SYNCS:
        monkeypatch.setattr(torch.Tensor, name, counted(getattr(torch.Tensor, name)))
    monkeypatch.setattr(torch.cuda, "synchronize", counted(torch.cuda.synchronize))
    tokenizer = build_tokenizer()
    model = build_model(tokenizer, DemoModelConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1))
    train, _ = make_problems(DemoTaskConfig(max_operand=9, num_train=16, num_eval=4))
    args = trl.SFTConfig(
        output_dir=str(tmp_path / base.__name__), max_steps=2, per_device_train_batch_size=4,
        gradient_accumulation_steps=2, report_to="none", use_cpu=True, save_strategy="no", disable_tqdm=True,
        max_length=32,
    )  # fmt: skip
    Counting(model=model, args=args, train_dataset=train.select_columns(["prompt", "completion"]),
             processing_class=tokenizer).train()  # fmt: skip
    return counts["syncs"], counts["calls"]


def test_reliable_adds_no_host_sync_per_micro_step(monkeypatch, tmp_path):
    import trl

    from trl_ext.reliability.reliable import Reliable

    class ReliableSFT(Reliable, trl.SFTTrainer):
        pass

    plain, plain_steps = _count_syncs_in_compute_loss(trl.SFTTrainer, monkeypatch, tmp_path)
    ours, our_steps = _count_syncs_in_compute_loss(ReliableSFT, monkeypatch, tmp_path)
    assert plain_steps == our_steps == 4  # 2 optimizer steps x 2 micro-steps
    assert ours == plain, f"Reliable adds {ours - plain} host reads over {our_steps} micro-steps (TRL: {plain})"
