"""Credit-assignment baselines on the option mode: a small shared policy, PPO, and the methods in ``credit``."""
