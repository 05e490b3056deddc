"""RLlib integration for the option-level action mode (envs/option_mode.py).

``ray[rllib]`` is an optional dependency (the ``rllib`` extra); nothing here imports it at package
import time.
"""
