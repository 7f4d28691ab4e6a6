"""RL algorithms in pure torch: GRPO and PPO advantages and losses (one file each), shared pieces in common.

Importing the package registers the built-in algorithms by name (``registry``), so whoever looks one up
finds them.
"""

from rlrouter.algos import grpo, ppo  # noqa: F401  (they register themselves)
