"""Reward functions that cannot silently poison a run: checked outputs, opt-in skipping of failures, a hang timeout.

TRL trusts what a reward function returns: an exception does not say which completion caused it, strings or a wrong
count fail inside ``torch.tensor``, a hang stalls training for good. ``GuardedReward`` wraps one function:

- Outputs: one real number or ``None`` / NaN ("cannot score", as in TRL) per completion; anything else stops the run.
- Exceptions (``reward_errors``): ``"raise"`` re-runs the batch one completion at a time and names the failing one;
  ``"skip"`` scores failing or invalid completions ``None``, counted in ``rewards/<name>/errors``. A wrong number of
  values always stops the run, as does a parameter without a default that TRL's call does not carry.
- Hangs (``reward_timeout`` seconds): an overrun scores the batch ``None`` (``rewards/<name>/timeouts``);
  ``max_consecutive_timeouts`` in a row stop the run. The call runs in a worker thread, which cannot be killed and runs
  on in the background (``signal.alarm`` only works on the main thread).

The wrapper keeps the function's ``__name__`` (TRL logs ``rewards/<name>/mean`` under it) and pickles like it.
"""

from __future__ import annotations

import inspect
import logging
import math
import numbers
import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch
from trl.trainer.utils import get_callable_name

logger = logging.getLogger(__name__)

REWARD_ERROR_MODES = ("raise", "skip")
# Keyword arguments TRL passes to every reward function that are not per-completion dataset columns.
TRL_REWARD_KWARGS = frozenset(
    {"prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric", "environments"}
)


def reward_columns(func: Callable) -> list[str] | None:
    """A reward's columns: its ``required_columns``, else its parameters without default bar ``TRL_REWARD_KWARGS``."""
    declared = getattr(func, "required_columns", None)
    if declared is not None:
        return list(declared)
    try:
        parameters = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return None
    return [
        p.name
        for p in parameters
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        and p.default is p.empty
        and p.name not in TRL_REWARD_KWARGS
    ]


class RewardFunctionError(RuntimeError):
    """A reward function raised, returned something that is not a reward, or kept hanging."""


class _Timeout(Exception):
    pass


def _batch_size(call: dict[str, Any]) -> int | None:
    for key in ("completions", "completion_ids", "prompts"):
        if call.get(key) is not None:
            return len(call[key])
    return None


def _short(value: Any, limit: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 15] + f"... ({len(text)} chars)"


def _is_real(value: Any) -> bool:
    """A real number (bools included), or a 0-d numpy / torch scalar holding one."""
    if isinstance(value, numbers.Real):
        return True
    item = getattr(value, "item", None)
    return callable(item) and getattr(value, "ndim", None) == 0 and isinstance(item(), numbers.Real)


def validate_reward_settings(errors: str, timeout: float | None) -> None:
    """Check ``reward_errors`` / ``reward_timeout`` at construction (fields of ``GRPOFamilyConfig``)."""
    if errors not in REWARD_ERROR_MODES:
        raise ValueError(
            f"reward_errors={errors!r}: must be 'raise' (stop at the first failing completion, the default) or "
            "'skip' (score failing completions None, counted in rewards/<name>/errors)."
        )
    if timeout is not None and not (isinstance(timeout, int | float) and math.isfinite(timeout) and timeout > 0):
        raise ValueError(
            f"reward_timeout={timeout!r}: must be a number of seconds > 0 (e.g. 60), or None for no bound."
        )


class GuardedReward:
    """``func`` with checked outputs, opt-in skipping of failures and a hang timeout (module docstring)."""

    def __init__(
        self,
        func: Callable,
        errors: str = "raise",
        timeout: float | None = None,
        max_consecutive_timeouts: int = 3,
    ):
        validate_reward_settings(errors, timeout)
        self.func = func
        self.errors = errors
        self.timeout = timeout
        self.max_consecutive_timeouts = max_consecutive_timeouts
        self.__name__ = get_callable_name(func)
        self.required_columns = reward_columns(func)  # the keywords it needs: checked against each call
        self.total_errors = 0
        self.total_timeouts = 0
        self._consecutive_timeouts = 0
        self._warned: set[str] = set()

    def __repr__(self) -> str:
        return f"GuardedReward({self.__name__}, errors={self.errors!r}, timeout={self.timeout!r})"

    # -- calling -------------------------------------------------------------------------------------------------

    def __call__(self, prompts: Sequence | None = None, completions: Sequence | None = None, **kwargs: Any) -> list:
        call = dict(kwargs)
        if prompts is not None:
            call["prompts"] = prompts
        if completions is not None:
            call["completions"] = completions
        n = _batch_size(call)
        if n is None:  # called outside TRL without a batch: nothing to check against
            return self.func(**call)
        missing = [name for name in self.required_columns or [] if name not in call]
        if missing:
            raise RewardFunctionError(self._missing_message(missing[0], call))
        log_metric = kwargs.get("log_metric")
        errors_before, timeouts_before = self.total_errors, self.total_timeouts
        try:
            values = self._call(call)
        except _Timeout:
            values = self._timed_out(n, call)
        except Exception as error:  # noqa: BLE001 - every failure of user code is reported or skipped
            values = self._per_completion(call, n, error)
        else:
            self._consecutive_timeouts = 0
            values = self._checked(values, n, call)
        if callable(log_metric):  # TRL averages these per logging step (and across processes)
            log_metric(f"rewards/{self.__name__}/errors", float(self.total_errors - errors_before))
            log_metric(f"rewards/{self.__name__}/timeouts", float(self.total_timeouts - timeouts_before))
        return values

    def _missing_message(self, name: str, call: dict[str, Any]) -> str:
        given = sorted(key for key in call if key not in TRL_REWARD_KWARGS)
        return (
            f"reward function {self.__name__!r} reads {name!r}, but TRL's call carries no such keyword (besides its "
            f"own, it passed {given}: dataset columns and rollout_func fields). Return {name!r} from the rollout_func "
            "(or add the column to every dataset scored, eval_dataset included), or give the parameter a default."
        )

    def _call(self, call: dict[str, Any]) -> Any:
        if self.timeout is None:
            return self.func(**call)
        box: dict[str, Any] = {}

        def target() -> None:
            try:
                box["value"] = self.func(**call)
            except BaseException as error:  # noqa: BLE001 - handed to the caller's thread
                box["error"] = error

        worker = threading.Thread(target=target, name=f"reward-{self.__name__}", daemon=True)
        worker.start()
        worker.join(self.timeout)
        if worker.is_alive():
            raise _Timeout
        if "error" in box:
            raise box["error"]
        return box["value"]

    def _timed_out(self, n: int, call: dict[str, Any]) -> list:
        self.total_timeouts += n
        self._consecutive_timeouts += 1
        if self._consecutive_timeouts >= self.max_consecutive_timeouts:
            raise RewardFunctionError(
                f"reward function {self.__name__!r} overran reward_timeout={self.timeout}s on "
                f"{self._consecutive_timeouts} calls in a row ({n} completions each, first prompt "
                f"{_short(self._row(call, 0).get('prompts'))}): it looks dead or deadlocked. Fix the function (or the "
                "service it calls), or raise reward_timeout."
            )
        self._warn_once(
            "timeout",
            f"reward function {self.__name__!r} overran reward_timeout={self.timeout}s: its {n} completions of this "
            f"batch are scored None, counted in rewards/{self.__name__}/timeouts (the call runs on in the background)."
            " Raise reward_timeout if the function is just slow.",
        )
        return [None] * n

    # -- failures ------------------------------------------------------------------------------------------------

    def _row(self, call: dict[str, Any], i: int) -> dict[str, Any]:
        """Completion ``i``'s slice of the call, with no-op logging callbacks so that a retry does not log twice."""
        n = _batch_size(call)
        row = {}
        for key, value in call.items():
            if key in ("log_extra", "log_metric"):
                row[key] = lambda *args, **kwargs: None
            elif key != "trainer_state" and isinstance(value, list | tuple) and len(value) == n:
                row[key] = value[i : i + 1]
            else:
                row[key] = value
        return row

    def _describe(self, call: dict[str, Any], i: int) -> str:
        """``completion 3 of 8 (prompt '1+2=' -> '3', step 5)``."""
        prompts, completions = call.get("prompts"), call.get("completions")
        details = [f"prompt {_short(prompts[i])}"] if prompts is not None else []
        if completions is not None:
            details.append(f"-> {_short(completions[i])}" if details else f"completion {_short(completions[i])}")
        text = " ".join(details)
        state = call.get("trainer_state")
        if state is not None and getattr(state, "global_step", None) is not None:
            text += f", step {state.global_step + 1}"
        return f"completion {i} of {_batch_size(call)} ({text.strip(', ')})"

    def _per_completion(self, call: dict[str, Any], n: int, batch_error: Exception) -> list:
        """The batch call raised: score the completions one at a time to find (with "skip": isolate) the failures."""
        values: list[Any] = []
        failures: list[tuple[int, BaseException]] = []
        for i in range(n):
            try:
                value = self._call(self._row(call, i))
            except _Timeout:
                self.total_timeouts += 1
                value = None
            except Exception as error:  # noqa: BLE001
                if self.errors == "raise":
                    raise RewardFunctionError(
                        f"reward function {self.__name__!r} raised {type(error).__name__}: {error} on "
                        f"{self._describe(call, i)}. Fix the function (a reward should return None for a completion "
                        "it cannot score), or set reward_errors='skip' to score such completions None (excluded from "
                        f"the group baseline, counted in rewards/{self.__name__}/errors)."
                    ) from error
                failures.append((i, error))
                value = None
            value = value.tolist() if hasattr(value, "tolist") else value
            values.append(value[0] if isinstance(value, list | tuple) and len(value) == 1 else value)
        if not failures:  # no completion fails alone: the failure depends on the whole batch
            if self.errors == "raise":
                raise RewardFunctionError(
                    f"reward function {self.__name__!r} raised {type(batch_error).__name__}: {batch_error} on a batch "
                    f"of {n} completions, but on none of them alone (first: {self._describe(call, 0)}). Fix the "
                    "function; reward_errors='skip' would score the whole batch None."
                ) from batch_error
            failures, values = [(i, batch_error) for i in range(n)], [None] * n
        values = self._checked(values, n, call)
        self.total_errors += len(failures)
        first, error = failures[0]
        self._warn_once(
            "error",
            f"reward function {self.__name__!r} raised {type(error).__name__}: {error} on {len(failures)} of {n} "
            f"completions (first: {self._describe(call, first)}). reward_errors='skip': they are scored None "
            f"(excluded from the group baseline) and counted in rewards/{self.__name__}/errors.",
        )
        return values

    def _checked(self, values: Any, n: int, call: dict[str, Any]) -> list:
        """One real number or None per completion; anything else raises, or with "skip" becomes None (counted)."""
        if hasattr(values, "tolist") and not isinstance(values, list | tuple):  # numpy array / tensor
            values = values.tolist()
        if not isinstance(values, list | tuple):
            raise RewardFunctionError(
                f"reward function {self.__name__!r} returned a {type(values).__name__} ({_short(values)}); it must "
                f"return a list with one float (or None) per completion, {n} here."
            )
        if len(values) != n:
            raise RewardFunctionError(
                f"reward function {self.__name__!r} returned {len(values)} values for {n} completions; it must return "
                "exactly one float (or None) per completion, in the order of `completions`."
            )
        out = []
        invalid = 0
        for i, value in enumerate(values):
            if value is None or (_is_real(value) and not math.isinf(float(value))):
                out.append(value if value is None else float(value))
                continue
            if self.errors == "raise":
                kind = "an infinite value" if _is_real(value) else f"a {type(value).__name__}"
                raise RewardFunctionError(
                    f"reward function {self.__name__!r} returned {kind} ({_short(value)}) for "
                    f"{self._describe(call, i)}. Rewards must be finite floats, or None for a completion that cannot "
                    "be scored: convert with float(...), or set reward_errors='skip' to count such values unscorable."
                )
            invalid += 1
            out.append(None)
        if invalid:
            self.total_errors += invalid
            self._warn_once(
                "invalid",
                f"reward function {self.__name__!r} returned {invalid} values that are not finite floats; "
                f"reward_errors='skip': scored None and counted in rewards/{self.__name__}/errors.",
            )
        return out

    def _warn_once(self, kind: str, message: str) -> None:
        if kind not in self._warned:
            self._warned.add(kind)
            logger.warning(message + " (Shown once per function; see the logged counts.)")


def guard_reward_funcs(reward_funcs: Any, errors: str = "raise", timeout: float | None = None) -> Any:
    """Wrap every plain callable of ``reward_funcs`` (one or a list) in ``GuardedReward``; reward models, model names,
    async and already guarded functions are returned as they are."""
    validate_reward_settings(errors, timeout)  # also when there is no function to wrap

    def wrap(func: Any) -> Any:
        if isinstance(func, str | torch.nn.Module | GuardedReward) or not callable(func):
            return func
        if inspect.iscoroutinefunction(func):  # TRL awaits these itself (asyncio.gather)
            return func
        return GuardedReward(func, errors=errors, timeout=timeout)

    if isinstance(reward_funcs, list | tuple):
        return [wrap(f) for f in reward_funcs]
    return wrap(reward_funcs)
