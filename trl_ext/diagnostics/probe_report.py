"""The probe's result (``ProbeReport``): a plain-text table, ``report.json`` and ``histogram.png``."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from typing import Any

from trl_ext.diagnostics.probe_stats import Recommendation, format_rounds


@dataclass
class ProbeReport:
    """The probe's result: ``meta`` (what was probed, how), the ``summarize`` sections, the recommendations and the
    per-prompt success counts (to filter prompts)."""

    meta: dict[str, Any]
    pass_at: dict[int, float]
    groups: dict[str, float]
    group_size_projection: list[dict[str, Any]]
    rewards: dict[str, Any]
    lengths: dict[str, float]
    recommendations: list[Recommendation]
    per_prompt: list[dict[str, Any]]

    def format(self) -> str:
        """A readable plain-text table."""
        m, g, r, ln = self.meta, self.groups, self.rewards, self.lengths
        policy = m["dynamic_sampling_policy"]  # the run's refill policy the rounds are projected under
        group_size = m["num_generations"]
        lines = [
            "trl-ext pre-flight probe",
            f"  model     {m['model']}",
            f"  dataset   {m['dataset']}: {m['num_prompts']} prompts x {group_size} generations, "
            f"max_completion_length {m['max_completion_length']}, temperature {m['temperature']}",
            f"  sampler   {m['sampler']} (seed {m['seed']}), {m['elapsed_s']:.1f} s",
            "",
            f"Success (reward >= {m['success_threshold']:g})",
            "  " + "  ".join(f"pass@{k:<3d}" for k in self.pass_at),
            "  " + "  ".join(f"{v:<8.3f}" for v in self.pass_at.values()),
            "",
            "Groups                    fraction",
            f"  all-correct             {g['all_correct_frac']:8.3f}",
            f"  all-wrong               {g['all_wrong_frac']:8.3f}",
            f"  mixed                   {g['mixed_frac']:8.3f}",
            f"  kept by dyn. sampling   {g['informative_frac']:8.3f}   -> {format_rounds(g['expected_rounds'])} rounds/step",
            f"  (run: {policy['groups_per_batch']} prompts per generation batch, a budget of "
            f"{policy['max_generation_batches']} generation batches per step)",
            "",
            "Group size   mixed   rounds/step   estimate",
        ]
        for row in self.group_size_projection:
            lines.append(
                f"  {row['num_generations']:<9d}{row['mixed_frac']:7.3f}   {format_rounds(row['expected_rounds']):>11}   "
                f"{row['estimate']}"
            )
        lines += [
            "",
            "Rewards   "
            + "  ".join(f"{key} {r.get(key, float('nan')):.3g}" for key in ("mean", "std", "min", "p50", "p90", "max"))
            + f"  unscorable {r['unscorable_frac']:.3f}",
            f"Lengths   mean {ln['mean']:.2f}  p50 {ln['p50']:g}  p90 {ln['p90']:g}  max {ln['max']:g}  "
            f"truncated {ln['truncated_frac']:.3f}",
        ]
        lines += [
            f"Reward model {name}: within-group std {v['within_group_std']:.3g}, std {v['std']:.3g}, range "
            f"[{v['min']:.3g}, {v['max']:.3g}]"
            for name, v in m.get("reward_model_spread", {}).items()
        ]
        lines += ["", "Recommendations"]
        lines += [f"  {i}. [{rec.code}] {rec.message}" for i, rec in enumerate(self.recommendations, 1)]
        return "\n".join(lines)

    def save(self, output_dir: str) -> tuple[str, str]:
        """Write ``report.json`` and ``histogram.png`` to ``output_dir``; returns their paths."""
        os.makedirs(output_dir, exist_ok=True)
        json_path = os.path.join(output_dir, "report.json")
        with open(json_path, "w") as f:
            json.dump(asdict(self), f, indent=2, default=float)  # pass@k's int keys become JSON's string keys
        png_path = os.path.join(output_dir, "histogram.png")
        self.plot(png_path)
        return json_path, png_path

    def plot(self, path: str) -> None:
        """Three histograms: per-prompt success rate (mass at 0 and 1 = uninformative groups), rewards, lengths."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        group_size = self.meta["num_generations"]
        rates = [row["successes"] / group_size for row in self.per_prompt]
        fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
        bins = [(i - 0.5) / group_size for i in range(group_size + 2)]
        axes[0].hist(rates, bins=bins, color="tab:blue", edgecolor="white")
        axes[0].set(
            xlabel="per-prompt success rate (c / G)", ylabel="prompts", title="Groups: 0 and 1 are uninformative"
        )
        for ax, hist, color in ((axes[1], self.rewards["histogram"], "tab:green"),
                                (axes[2], self.lengths["histogram"], "tab:orange")):  # fmt: skip
            if hist["counts"]:
                edges = hist["edges"]
                widths = [b - a for a, b in zip(edges, edges[1:], strict=False)]
                ax.bar(edges[:-1], hist["counts"], width=widths, align="edge", color=color, edgecolor="white")
        axes[1].set(xlabel="reward", ylabel="completions", title="Reward distribution")
        axes[2].axvline(self.meta["max_completion_length"], color="k", linestyle="--", label="max_completion_length")
        axes[2].set(xlabel="completion length (tokens)", ylabel="completions",
                    title=f"Lengths ({self.lengths['truncated_frac']:.0%} truncated)")  # fmt: skip
        axes[2].legend(loc="upper left", fontsize=8)
        fig.suptitle(
            f"{self.meta['model']}: pass@1 {self.pass_at[1]:.3f}, pass@{group_size} {self.pass_at[group_size]:.3f}",
            fontsize=10,
        )
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
