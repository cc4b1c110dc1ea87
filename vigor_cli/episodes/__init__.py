"""Episodes: rollouts of several turns, where an environment answers each of the model's turns.

Details: docs/modules.md.
"""
