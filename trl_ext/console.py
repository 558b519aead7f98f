"""What a recipe prints: an opening line, a tqdm bar per phase, a compact line per log, a summary table. Every metric
still reaches ``metrics.jsonl`` and ``report_to``; library noise is hidden unless ``TRL_EXT_LIBRARY_WARNINGS=1``."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import warnings
from collections.abc import Sequence
from typing import Any

from tqdm import tqdm
from transformers import TrainerCallback

LIBRARY_WARNINGS_ENV = "TRL_EXT_LIBRARY_WARNINGS"
PLACEHOLDER = "-"  # a column's figure that this log does not carry
HELD_OUT_KEY = "held_out/accuracy"  # logged by trl_ext.diagnostics.held_out

# (log key, label, format) of the shown figures, in order; a phase shows those its logs carry (``columns``).
FIGURES: tuple[tuple[str, str, str], ...] = (
    ("loss", "loss", "{:.3f}"),  # shown for SFT / DPO; RL losses are near zero by construction (see below)
    ("reward", "reward", "{:.3f}"),
    ("dynamic_sampling/kept_group_frac", "kept", "{:.2f}"),
    ("dynamic_sampling/rounds", "rounds", "{:.2f}"),
    ("clip_ratio/region_mean", "clip", "{:.3f}"),
    ("entropy", "entropy", "{:.3f}"),
    ("mean_token_accuracy", "token acc", "{:.3f}"),
    ("rewards/accuracies", "pref acc", "{:.2f}"),
    ("objective/scores", "score", "{:.3f}"),
    ("policy/clipfrac_avg", "clip", "{:.3f}"),
    ("objective/entropy", "entropy", "{:.3f}"),
    (HELD_OUT_KEY, "held-out", "{:.3f}"),
)
_RL_KEYS = {"reward", "objective/scores"}  # with these, "loss" is a surrogate whose value means little: not shown


def _show_library_output() -> bool:
    return os.environ.get(LIBRARY_WARNINGS_ENV, "").lower() in ("1", "true", "yes")


def quiet_libraries() -> None:
    """Hide library output a user cannot act on (renamed-argument ``FutureWarning``s, DeepSpeed's accelerator guess,
    loading bars), unless ``TRL_EXT_LIBRARY_WARNINGS=1``. Idempotent; call it before parsing the configs."""
    _our_warnings_through_tqdm()
    if _show_library_output():
        return
    # transformers 5 renamed gradient_checkpointing* to activation_checkpointing*; TRL 1.12 still uses the old names
    warnings.filterwarnings(
        "ignore", message=r"`(is_)?gradient_checkpointing\w*` is deprecated", category=FutureWarning
    )
    # TRL's SFT loss passes past_key_values
    logging.getLogger("transformers.utils.generic").addFilter(
        lambda record: "`past_key_values`/`cache_params`" not in record.getMessage()
    )
    # recipes/ppo.py uses TRL's PPOTrainer, which only trl.experimental still ships: our choice, TRL's notice.
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    # DeepSpeed logs its accelerator guess on import; without CUDA it picks the CPU anyway
    if "DS_ACCELERATOR" not in os.environ:
        import torch

        if not torch.cuda.is_available():
            os.environ["DS_ACCELERATOR"] = "cpu"
    import datasets
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # "Loading weights", "Writing model shards"
    datasets.disable_progress_bars()  # TRL's dataset preprocessing ("Tokenizing train dataset", ...)


class _DropLines:
    """A text stream that writes through to ``stream`` every line except those equal to one of ``lines``."""

    def __init__(self, stream: Any, lines: Sequence[str]) -> None:
        self.stream, self.lines, self.pending = stream, set(lines), ""

    def write(self, text: str) -> int:
        *complete, self.pending = (self.pending + text).split("\n")
        for line in complete:
            if line not in self.lines:
                self.stream.write(line + "\n")
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


@contextlib.contextmanager
def library_lines_dropped(*lines: str):
    """Within the block, stdout lines equal to one of ``lines`` are dropped, unless ``TRL_EXT_LIBRARY_WARNINGS=1``."""
    if _show_library_output():
        yield
        return
    stream = _DropLines(sys.stdout, lines)
    try:
        with contextlib.redirect_stdout(stream):
            yield
    finally:
        if stream.pending:
            stream.stream.write(stream.pending)


def _our_warnings_through_tqdm() -> None:
    """trl-ext's own warnings (logger ``trl_ext.*``) go to stderr through ``tqdm.write`` (a live bar stays whole)."""
    root = logging.getLogger("trl_ext")
    if any(isinstance(h, _TqdmHandler) for h in root.handlers):
        return
    handler = _TqdmHandler()
    handler.setLevel(logging.WARNING)
    handler.setFormatter(logging.Formatter("%(levelname)s [%(name)s] %(message)s"))
    root.addHandler(handler)
    if root.level == logging.NOTSET:
        root.setLevel(logging.WARNING)


class _TqdmHandler(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        try:
            tqdm.write(self.format(record), file=sys.stderr)
        except Exception:  # noqa: BLE001 (logging must never raise)
            self.handleError(record)


def columns(
    logs: dict[str, Any], held_out: bool = False, shown: Sequence[tuple[str, str, str]] = ()
) -> list[tuple[str, str, str]]:
    """The ``FIGURES`` entries a phase shows: ``shown`` kept in place, then those of ``logs`` not yet shown, in
    ``FIGURES`` order (one per label, no ``loss`` with a reward), and the held-out column from the start if asked."""
    keys = {key for key, _, _ in shown}
    rl = any(key in logs or key in keys for key in _RL_KEYS)
    chosen, labels = list(shown), {label for _, label, _ in shown}
    for key, label, fmt in FIGURES:
        wanted = key in logs or (held_out and key == HELD_OUT_KEY)
        if not wanted or (key == "loss" and rl) or label in labels:
            continue
        labels.add(label)
        chosen.append((key, label, fmt))
    return chosen


def figures(logs: dict[str, Any], shown: Sequence[tuple[str, str, str]]) -> list[str]:
    """``["reward 0.412", "held-out -    ", ...]``: one per column of ``shown``, ``-`` where ``logs`` has none."""
    out = []
    for key, label, fmt in shown:
        value = logs.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            out.append(f"{label} {fmt.format(value)}")
        else:
            out.append(f"{label} {PLACEHOLDER:<{len(fmt.format(0.0))}}")
    return out


class ConsoleCallback(TrainerCallback):
    """A tqdm bar per phase (postfix: the latest figures) and one compact line per log, in place of transformers'
    ``ProgressCallback`` / ``PrinterCallback``. Install with :func:`use_console`; prints on the local main process."""

    def __init__(self, phase: str, bar: bool | None = None, held_out: bool = False):
        self.phase = phase
        self.show_bar = bar  # None: a bar unless the training arguments say disable_tqdm
        self.held_out = held_out
        self.bar: tqdm | None = None
        self.columns: list[tuple[str, str, str]] = []  # set by the first log with figures, extended only at the end
        self.lines: list[str] = []  # what was written, for tests and notebooks

    def on_train_begin(self, args, state, control, **kwargs):
        show = not getattr(args, "disable_tqdm", False) if self.show_bar is None else self.show_bar
        if show and state.is_local_process_zero and self.bar is None:
            self.bar = tqdm(
                total=state.max_steps,
                initial=state.global_step,
                desc=self.phase,
                unit="step",
                dynamic_ncols=True,
                mininterval=0.5,
            )

    def on_step_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.update(state.global_step - self.bar.n)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_local_process_zero or not logs:
            return
        if "train_runtime" in logs:  # transformers' end-of-training record: the summary says it better
            return
        if not any(key in logs for key, _, _ in FIGURES):
            return  # no figure in the log (e.g. an evaluation's eval_* record)
        self.columns = columns(logs, self.held_out, self.columns)
        shown = figures(logs, self.columns)
        if self.bar is not None:
            self.bar.set_postfix_str(", ".join(shown), refresh=False)
        width = len(str(state.max_steps))
        line = f"{self.phase} step {state.global_step:>{width}}/{state.max_steps} | " + " | ".join(shown)
        line = line.rstrip()
        self.lines.append(line)
        tqdm.write(line, file=sys.stdout)

    def on_train_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.update(state.global_step - self.bar.n)
            self.bar.close()
            self.bar = None


def use_console(trainer: Any, phase: str, bar: bool | None = None, held_out: bool = False) -> ConsoleCallback:
    """Swap ``trainer``'s ``ProgressCallback`` / ``PrinterCallback`` for a :class:`ConsoleCallback` (``bar=None``: a
    bar unless ``disable_tqdm``; ``held_out``: the lines carry held-out accuracy's column from the first)."""
    from transformers import PrinterCallback, ProgressCallback

    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    console = ConsoleCallback(phase, bar=bar, held_out=held_out)
    trainer.add_callback(console)
    return console


def precision_label(training_args: Any) -> str:
    """``"bf16 mixed precision on 1 GPU"``, ``"fp32 on CPU"``: what the trainer will compute in, and where."""
    import torch

    kind = "bf16 mixed precision" if training_args.bf16 else "fp16 mixed precision" if training_args.fp16 else "fp32"
    if getattr(training_args, "use_cpu", False) or not torch.cuda.is_available():
        return f"{kind} on CPU"
    count = torch.cuda.device_count()
    return f"{kind} on {count} GPU{'s' if count > 1 else ''} per node"


def generation_backend(training_args: Any) -> str:
    """``"transformers"``, ``"vLLM colocate"`` or ``"vLLM server (host:port)"``: what generates the completions."""
    if not getattr(training_args, "use_vllm", False):
        return "transformers"
    if training_args.vllm_mode != "server":
        return "vLLM colocate"
    url = getattr(training_args, "vllm_server_base_url", None)
    return f"vLLM server ({url or f'{training_args.vllm_server_host}:{training_args.vllm_server_port}'})"


def opening_line(recipe: str, parts: Sequence[str | None]) -> str:
    """``[dapo] DAPOTrainer | model ... | data ... | 500 steps | fp32 on CPU | ...``."""
    return f"[{recipe}] " + " | ".join(part for part in parts if part)


def summary_table(title: str, rows: Sequence[tuple[str, Any]]) -> str:
    """A small two-column table, labels aligned: ``rows`` of ``(label, text)``; rows whose text is None are left out."""
    rows = [(label, str(text)) for label, text in rows if text is not None]
    width = max((len(label) for label, _ in rows), default=0)
    return "\n".join([title, *(f"  {label:<{width}}  {text}" for label, text in rows)])


def format_duration(seconds: float) -> str:
    """``"1 min 45 s"`` / ``"12.3 s"``."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s"
