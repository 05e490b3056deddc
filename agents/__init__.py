"""Policies: scripted, expert, noisy and misbehaving teams, HF / vLLM / OpenAI-compatible LLMs.

Importing this package has no side effect; the Gymnasium single-role environments are registered
by ``maopd.agents.registration.register_envs()``.
"""
