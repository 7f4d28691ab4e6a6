"""RL algorithms in pure torch: GRPO and PPO advantages and losses (one file each), shared pieces in common."""
