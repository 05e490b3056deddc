"""The learner: rollouts, advantages, PPO, Stage I / Stage II trainers."""
