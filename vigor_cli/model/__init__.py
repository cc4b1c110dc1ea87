"""The policy's model: loading (local, hub, bundled tiny, LoRA, 4-bit), the tiny model itself, and the GPU memory plan read from a config.json.

The map of the package: docs/design.md; each module: docs/modules.md."""
