"""RLlib integration for the option-level action mode (envs/option/wrapper.py).

``ray[rllib]`` is an optional dependency (the ``rllib`` extra); nothing here imports it at package
import time. ``bash scripts/setup.sh`` leaves it out; install it with ``INSTALL_RLLIB``.
"""

INSTALL_RLLIB = ".venv/bin/python -m pip install -e '.[rllib]'"


def missing_ray(exc: ModuleNotFoundError) -> ModuleNotFoundError:
    """The error to raise when Ray is not installed: it names the install command."""
    return ModuleNotFoundError(
        f"maopd.training.rllib needs Ray RLlib ({exc}), which `bash scripts/setup.sh` does not install; "
        f"install it with: {INSTALL_RLLIB}   (or `bash scripts/setup.sh --dev`)",
        name="ray",
    )
