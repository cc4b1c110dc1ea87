"""vigor: GRPO post-training with variance-guided rollout allocation (VIGOR)."""

__version__ = "0.1.0"
