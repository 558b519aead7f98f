"""Looking at a model and a run: the pre-flight probe (``probe``), the training health monitor (``health``) and the
held-out greedy accuracy used before, during and after RL (``held_out``)."""

from trl_ext.diagnostics.health import HealthMonitor, HealthThresholds
from trl_ext.diagnostics.probe import ProbeArguments, probe_model, run_probe

__all__ = ["HealthMonitor", "HealthThresholds", "ProbeArguments", "probe_model", "run_probe"]
