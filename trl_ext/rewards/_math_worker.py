"""Helper process of :class:`rewards.math.MathAccuracy`'s ``process`` backend.

Reads one JSON request per line on stdin (``solution``, ``text`` and :func:`rewards.math.score_one`'s options),
writes one JSON reply per line (``reward``, ``status``). It runs :func:`~rewards.math.score_one` in its own main
thread, so math-verify's ``signal.alarm`` timeouts work here even when the trainer calls the reward from another
thread; the parent kills it if it still overruns. It exits when its stdin closes (the parent went away).
"""

from __future__ import annotations

import json
import sys

from trl_ext.rewards.math import _quiet_math_verify, score_one


def main() -> None:
    _quiet_math_verify()
    import math_verify  # noqa: F401  - pay the sympy import before announcing readiness

    out = sys.stdout
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        try:
            request = json.loads(line)
            solution = request.pop("solution")
            text = request.pop("text")
            reward, status = score_one(solution, text, **request)
        except Exception as error:  # a malformed request must not take the helper down
            reward, status = 0.0, f"error: {type(error).__name__}"
        out.write(json.dumps({"reward": reward, "status": status}) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
