"""`vigor train`'s loop and everything it calls per step: data, rollout rounds, the learner, checkpoints, health checks, resume and rerun.

The map of the package: docs/design.md; each module: docs/modules.md."""
