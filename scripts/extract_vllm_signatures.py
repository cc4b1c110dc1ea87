"""Extract the vLLM API that ``vigor_cli/rollout/vllm.py`` calls from a vLLM wheel.

The wheel is read as a zip and its Python source parsed with ``ast``: nothing
from it is imported or executed, so this runs on a machine without CUDA (or
the wheel's torch). The output, ``tests/fixtures/vllm_signatures.json``, is
what the recording stand-in in ``tests/test_vllm_engine.py`` is checked
against, so the engine's calls are checked against the pinned release's real
signatures.

    pip download vllm==0.33.0 --no-deps -d /tmp/vllm_wheel
    python scripts/extract_vllm_signatures.py /tmp/vllm_wheel/vllm-0.33.0-*.whl \
        -o tests/fixtures/vllm_signatures.json
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import zipfile
from pathlib import Path

# (file in the wheel, class, methods) whose signatures the engine relies on.
METHODS = [
    (
        "vllm/entrypoints/llm.py",
        "LLM",
        ["__init__", "generate", "sleep", "wake_up", "reset_prefix_cache", "apply_model",
         "collective_rpc"],
    ),
    ("vllm/v1/worker/worker_base.py", "WorkerBase", ["apply_model"]),
    ("vllm/model_executor/models/qwen2.py", "Qwen2ForCausalLM", ["load_weights"]),
    ("vllm/outputs.py", "RequestOutput", ["__init__"]),
]
# (file, class) whose annotated class-level fields (dataclass / msgspec / TypedDict) we use.
FIELDS = [
    ("vllm/sampling_params.py", "SamplingParams"),
    ("vllm/engine/arg_utils.py", "EngineArgs"),
    ("vllm/outputs.py", "CompletionOutput"),
    ("vllm/logprobs.py", "Logprob"),
    ("vllm/inputs/llm.py", "TokensPrompt"),
]
# (file, module-level name) of Literal aliases and constants.
CONSTANTS = [
    ("vllm/config/model.py", "LogprobsMode"),
    ("vllm/config/parallel.py", "DistributedExecutorBackend"),
    ("vllm/v1/executor/abstract.py", "SLEEP_TAGS"),
]


def _src(node: ast.AST | None) -> str | None:
    return None if node is None else ast.unparse(node)


def _params(fn: ast.FunctionDef) -> list[dict]:
    """Parameters in order, as inspect would list them (kind, default source, annotation)."""
    a = fn.args
    out: list[dict] = []
    positional = a.posonlyargs + a.args
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    for i, (arg, default) in enumerate(zip(positional, defaults)):
        kind = "POSITIONAL_ONLY" if i < len(a.posonlyargs) else "POSITIONAL_OR_KEYWORD"
        out.append(_param(arg, kind, default))
    if a.vararg:
        out.append(_param(a.vararg, "VAR_POSITIONAL", None))
    for arg, default in zip(a.kwonlyargs, a.kw_defaults):
        out.append(_param(arg, "KEYWORD_ONLY", default))
    if a.kwarg:
        out.append(_param(a.kwarg, "VAR_KEYWORD", None))
    return out


def _param(arg: ast.arg, kind: str, default: ast.AST | None) -> dict:
    return {
        "name": arg.arg,
        "kind": kind,
        "default": _src(default),
        "annotation": _src(arg.annotation),
    }


def _class(tree: ast.Module, name: str, path: str) -> ast.ClassDef:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise SystemExit(f"{path}: class {name} not found (the API moved: update this script)")


def _method(cls: ast.ClassDef, name: str, path: str) -> ast.FunctionDef:
    found = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name]
    if not found:
        raise SystemExit(f"{path}: {cls.name}.{name} not found (the API moved: update this script)")
    return found[-1]  # the implementation follows any @overload stubs


def _fields(cls: ast.ClassDef) -> dict[str, dict]:
    return {
        node.target.id: {"annotation": _src(node.annotation), "default": _src(node.value)}
        for node in cls.body
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
    }


def _constant(tree: ast.Module, name: str, path: str) -> str:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            return ast.unparse(node.value)
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if node.target.id == name and node.value is not None:
                return ast.unparse(node.value)
    raise SystemExit(f"{path}: {name} not found (the API moved: update this script)")


def _literal_values(source: str) -> list[str]:
    """The string values inside ``Literal[...]`` or ``frozenset((...))`` source text."""
    return sorted(
        n.value
        for n in ast.walk(ast.parse(source, mode="eval"))
        if isinstance(n, ast.Constant) and isinstance(n.value, str)
    )


def extract(wheel: Path) -> dict:
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        trees: dict[str, ast.Module] = {}

        def tree(path: str) -> ast.Module:
            if path not in names:
                raise SystemExit(f"{wheel.name}: {path} missing (the API moved: update this script)")
            if path not in trees:
                trees[path] = ast.parse(zf.read(path).decode("utf-8"), filename=path)
            return trees[path]

        metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
        version = next(
            line.split(":", 1)[1].strip()
            for line in zf.read(metadata).decode("utf-8").splitlines()
            if line.startswith("Version:")
        )
        out: dict = {"vllm_version": version, "wheel": wheel.name, "methods": {}, "fields": {},
                     "constants": {}}
        for path, cls_name, methods in METHODS:
            cls = _class(tree(path), cls_name, path)
            for m in methods:
                out["methods"][f"{cls_name}.{m}"] = {
                    "file": path, "params": _params(_method(cls, m, path))
                }
        for path, cls_name in FIELDS:
            out["fields"][cls_name] = {"file": path, "fields": _fields(_class(tree(path), cls_name, path))}
        for path, name in CONSTANTS:
            source = _constant(tree(path), name, path)
            out["constants"][name] = {"file": path, "source": source,
                                      "values": _literal_values(source)}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wheel", type=Path, help="a downloaded vllm-*.whl")
    parser.add_argument("-o", "--output", type=Path, default=None, help="JSON file (default stdout)")
    args = parser.parse_args(argv)
    if not args.wheel.is_file():
        print(f"wheel not found: {args.wheel}", file=sys.stderr)
        return 2
    text = json.dumps(extract(args.wheel), indent=1, sort_keys=True) + "\n"
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
