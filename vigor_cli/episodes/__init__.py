"""Episodes: rollouts of several turns, where an environment answers each of the model's turns.

- ``base.py``: the :class:`~vigor_cli.episodes.base.Episode` rollout (model and environment
  tokens, the loss mask over them, its messages and how it ended), the environment interface
  the episode loop drives, and the step's episode metrics;
- ``loop.py``: the turn-by-turn loop over a rollout engine, a batch of episodes at once;
- ``messages.py``: an environment's messages as tokens (the chat template's format, or plain text);
- ``registry.py``: ``task.env`` names (built-in environments) and ``FILE.py:Factory``
  (an environment class in TRL's ``environment_factory`` convention, ``tools.py``);
- ``scoring.py``: an episode's reward, once per episode, by the task's reward functions;
- ``code_feedback.py``, ``higher_lower.py``: the built-in environments.

docs/episodes.md describes the episode format of a run's files.
"""
