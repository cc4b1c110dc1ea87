"""`vigor export` on REAL short trainings of the tiny model: full fine-tuning, LoRA (the adapter
folder and merged), and a LoRA run on a base with a Qwen-style chat template whose end of turn
is not its EOS. Greedy generations of each exported folder through plain transformers equal
the checkpoint's (loaded as vigor loads it, stopped at the run's stop tokens) token for token,
and generation_config.json holds the run's stop ids.

Each run is one step, trained once for the module.
"""

from __future__ import annotations

import json
import stat
import os
from pathlib import Path

import pytest
import torch

from vigor_cli.settings import build_config
from vigor_cli.model.loading import TINY_DIR
from vigor_cli.rollout.weights import stop_token_ids

slow = pytest.mark.slow  # the tests on trained runs: three one-step trainings, a dozen model loads

PROMPTS = ["12+7=", "What is 3*4? ", "39-8", "<bos>5+5", "100-1="]


def quiet():
    from rich.console import Console

    return Console(file=open(os.devnull, "w"))


def sets(out: Path, name: str, *extra: str) -> list[str]:
    return [
        "model.name_or_path=tiny", "model.lora.enabled=false", "task.name=tiny-math",
        "train.prompts_per_step=8", "train.steps=1", "train.eval_limit=2", "train.eval_every=0",
        "train.log_completions_every=0", "sampling.max_new_tokens=12", "allocation.strategy=grpo",
        "allocation.group_size=4", "grpo.learning_rate=1e-2", "task.max_prompt_tokens=64",
        "engine.kind=hf", "train.reward_workers=1", f"train.output_dir={out}", f"train.run_name={name}",
        *extra,
    ]


def qwen_style_base(folder: Path) -> Path:
    """The tiny model as a base model with a Qwen2.5-style chat template: its EOS and generation
    config name <|endoftext|>, its turns end with <|im_end|> (the embedding of the tiny EOS,
    scaled, so greedy decoding writes it where the tiny model stops, and runs on after it)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    template = (
        "{%- for message in messages %}"
        "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
        "{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
    )
    tok = AutoTokenizer.from_pretrained(TINY_DIR)
    tok.add_special_tokens({"additional_special_tokens": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]})
    tok.eos_token = tok.pad_token = "<|endoftext|>"
    tok.chat_template = template
    model = AutoModelForCausalLM.from_pretrained(TINY_DIR, dtype=torch.float32)
    model.resize_token_embeddings(len(tok), mean_resizing=False)
    end, text_end = tok.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])
    with torch.no_grad():
        weight = model.get_input_embeddings().weight
        weight[end] = weight[2] * 1.5
        weight[text_end] = 0.0
    model.generation_config.eos_token_id = text_end
    model.config.eos_token_id = text_end
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    from vigor_cli.train.trainer import train

    out = tmp_path_factory.mktemp("runs")
    base = qwen_style_base(out / "qwen-style-base")
    made = {}
    for name, extra in (("full", []), ("lora", ["model.lora.enabled=true"]),
                        ("qwen", ["model.lora.enabled=true", f"model.name_or_path={base}"])):
        train(build_config(sets=sets(out, name, *extra)), out=quiet())
        made[name] = out / name
    made["qwen-base"] = base
    return made


def greedy(model, tokenizer, stops=None) -> list[list[int]]:
    """Greedy completions (token ids) of PROMPTS; ``stops`` None: the model's generation config."""
    out = []
    for text in PROMPTS:
        ids = tokenizer(text, return_tensors="pt", add_special_tokens=False).input_ids
        kwargs = {"max_new_tokens": 24, "do_sample": False}
        if stops is not None:
            kwargs["eos_token_id"] = stops
        with torch.no_grad():
            out.append(model.generate(ids, attention_mask=torch.ones_like(ids), **kwargs)[0, ids.shape[1]:].tolist())
    return out


def checkpoint_generations(run: Path) -> tuple[list[list[int]], list[int]]:
    """Greedy completions of the run's newest checkpoint, loaded as `vigor eval --run` loads it
    (vigor's own loader, LoRA as a live adapter), stopped at the run's stop tokens."""
    from vigor_cli.config import RunConfig
    from vigor_cli.model.loading import load_policy
    from vigor_cli.run.directory import RunDir, read_config

    cfg = RunConfig.model_validate(read_config(run))
    checkpoint = RunDir(run).store.pick(None, print)
    model, tok, _ = load_policy(cfg.model.model_copy(update={"device": "cpu"}), str(checkpoint))
    model.eval()
    stops = stop_token_ids(model, tok)
    return greedy(model, tok, stops), stops


def exported(folder: Path) -> list[list[int]]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    return greedy(model, AutoTokenizer.from_pretrained(folder))


def exported_adapter(folder: Path, base: Path) -> list[list[int]]:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), folder).eval()
    return greedy(model, AutoTokenizer.from_pretrained(folder))


def gen_config_stops(folder: Path) -> list[int]:
    eos = json.loads((folder / "generation_config.json").read_text())["eos_token_id"]
    return sorted(eos if isinstance(eos, list) else [eos])


def weights(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


@slow
def test_full_fine_tuning_export_generates_as_the_checkpoint(runs, tmp_path, vigor):
    code, out, err = vigor("export", str(runs["full"]), "--out", str(tmp_path / "m"), "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["kind"] == "full" and result["checkpoint"] == "step-1" and result["dtype"] == "float32"
    folder = tmp_path / "m"
    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json"} <= set(os.listdir(folder))
    assert not any(n.endswith(".pt") or n == "manifest.json" for n in os.listdir(folder))  # no trainer state
    expected, stops = checkpoint_generations(runs["full"])
    assert exported(folder) == expected
    assert gen_config_stops(folder) == stops == [2]
    # the run changed the weights: the export is the trained model, not the base
    trained, base = weights(folder), weights(TINY_DIR)
    assert max((trained[k] - base[k]).abs().max().item() for k in base) > 1e-4


@slow
def test_lora_adapter_and_merged_exports_generate_as_the_checkpoint(runs, tmp_path, vigor):
    expected, stops = checkpoint_generations(runs["lora"])
    code, out, err = vigor("export", str(runs["lora"]), "--out", str(tmp_path / "adapter"))
    assert code == 0, err
    adapter = tmp_path / "adapter"
    assert {"adapter_config.json", "adapter_model.safetensors", "generation_config.json"} <= set(os.listdir(adapter))
    # the bundled base by its portable name (issue 31: never the training machine's path); with
    # the base loaded from where it is here, PEFT applies the adapter
    assert json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"] == "tiny"
    assert exported_adapter(adapter, TINY_DIR) == expected
    code, out, err = vigor("export", str(runs["lora"]), "--out", str(tmp_path / "merged"), "--merge-lora")
    assert code == 0, err
    merged = tmp_path / "merged"
    assert "adapter_config.json" not in os.listdir(merged) and (merged / "model.safetensors").is_file()
    assert "quantization_config" not in json.loads((merged / "config.json").read_text())
    assert exported(merged) == expected
    assert gen_config_stops(adapter) == gen_config_stops(merged) == stops
    # the adapter moved the weights, and the merge folded it in
    trained, base = weights(merged), weights(TINY_DIR)
    assert max((trained[k] - base[k]).abs().max().item() for k in base) > 1e-4


@slow
def test_generation_config_holds_the_runs_stop_tokens(runs, tmp_path, vigor):
    """A base whose EOS and generation config name <|endoftext|> but whose turns end with
    <|im_end|>: the run stopped at both, and so does the exported folder in transformers."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    code, out, err = vigor("export", str(runs["qwen"]), "--out", str(tmp_path / "q"), "--merge-lora")
    assert code == 0, err
    folder = tmp_path / "q"
    tok = AutoTokenizer.from_pretrained(folder)
    both = sorted(tok.convert_tokens_to_ids(["<|endoftext|>", "<|im_end|>"]))
    expected, stops = checkpoint_generations(runs["qwen"])
    assert stops == both and gen_config_stops(folder) == both
    assert exported(folder) == expected
    end = tok.convert_tokens_to_ids("<|im_end|>")
    assert any(seq and seq[-1] == end for seq in expected)  # some completion ends at the end of turn
    # the base's own generation config would have run past it
    base = AutoModelForCausalLM.from_pretrained(runs["qwen-base"]).eval()
    assert any(end in seq[:-1] for seq in greedy(base, tok))


@slow
def test_export_a_chosen_step_and_bad_input(runs, tmp_path, vigor):
    code, out, err = vigor("export", str(runs["full"]), "--out", str(tmp_path / "s"), "--step", "1", "--json")
    assert code == 0 and json.loads(out)["checkpoint"] == "step-1", err
    for args, needle in [
        ([str(runs["full"]), "--out", str(tmp_path / "x"), "--step", "7"], "--step 7: "),
        ([str(runs["full"]), "--out", str(tmp_path / "x"), "--merge-lora"], "--merge-lora: "),
        ([str(runs["full"]), "--out", str(tmp_path / "s")], "is not an empty directory"),
        ([str(tmp_path / "nope"), "--out", str(tmp_path / "x")], "run directory not found"),
        ([str(runs["full"]), "--out", str(tmp_path / "x"), "--dtype", "int8"], "'int8' is not one of"),
    ]:
        code, out, err = vigor("export", *args)
        assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, (args, err)
    assert not (tmp_path / "x").exists()
    # a damaged checkpoint (checked against its manifest) is refused, naming what is wrong
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(runs["full"], copy)
    with open(copy / "checkpoints" / "step-1" / "model.safetensors", "r+b") as f:
        f.seek(100)
        f.write(b"\x00\x01\x02")
    code, out, err = vigor("export", str(copy), "--out", str(tmp_path / "x"))
    assert code == 2 and "model.safetensors does not match its sha256" in err and not (tmp_path / "x").exists()

    # a 4-bit run is merged on the GPU it trained on (its base is dequantised as the engine's
    # copy is); on a machine without one: one line, nothing written
    if not torch.cuda.is_available():
        import yaml

        qlora = tmp_path / "qlora"
        shutil.copytree(runs["lora"], qlora)
        cfg = yaml.safe_load((qlora / "config.yaml").read_text())
        cfg["model"]["load_in_4bit"] = True
        (qlora / "config.yaml").write_text(yaml.safe_dump(cfg))
        code, out, err = vigor("export", str(qlora), "--out", str(tmp_path / "x"), "--merge-lora")
        assert code == 2 and "--merge-lora: the run's base is 4-bit (model.load_in_4bit)" in err
        assert len(err.strip().splitlines()) == 1 and not (tmp_path / "x").exists()
        # its adapter exports here all the same: nothing is loaded but the tokenizer
        code, out, err = vigor("export", str(qlora), "--out", str(tmp_path / "qa"))
        assert code == 0, err
        assert (tmp_path / "qa" / "adapter_model.safetensors").read_bytes() == (
            qlora / "checkpoints" / "step-1" / "adapter_model.safetensors").read_bytes()


def test_push_to_hub_offline_is_refused_before_any_work(tmp_path, vigor, monkeypatch):
    from vigor_cli import hub

    monkeypatch.setattr(hub, "unreachable", lambda: "the hub (https://huggingface.co) cannot be reached (offline?)")
    code, out, err = vigor("export", str(tmp_path / "no-run-needed"), "--out", str(tmp_path / "x"),
                           "--push-to-hub", "me/model")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "--push-to-hub me/model: the hub (https://huggingface.co) cannot be reached (offline?)" in err
    assert not (tmp_path / "x").exists()


def test_train_summary_prints_the_export_command(tmp_path):
    from rich.console import Console

    from vigor_cli.report.train_summary import print_summary

    for lora, flag in ((False, ""), (True, " --merge-lora")):
        run = tmp_path / f"run lora={lora}"
        run.mkdir()
        (run / "config.yaml").write_text(f"model:\n  lora:\n    enabled: {str(lora).lower()}\n")
        console = Console(width=300, record=True)
        print_summary({"run_dir": str(run), "start_accuracy": 0.5, "final_accuracy": 0.75, "wall_time": 10,
                       "rollouts": 64}, console)
        text = console.export_text()
        assert f"vigor export '{run}' --out '{run}/export'{flag}" in text


@pytest.mark.slow
def test_export_of_the_newest_checkpoint_loads_and_generates(tmp_path, vigor, monkeypatch):
    """`vigor export RUN --out DIR` without --step, as the end of `vigor train` prints it, on a
    run whose checkpoint holds the tiny model as saved (no training: fast). It stopped with a
    traceback ('RunDir' object has no attribute 'pick_checkpoint') after the run directory
    split; the trained-run tests above are slow, so nothing fast caught it."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from vigor_cli.model.loading import save_policy
    from vigor_cli.run.directory import RunDir

    cfg = build_config(sets=sets(tmp_path, "run"))
    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    run.write_config(cfg)
    model, tok = AutoModelForCausalLM.from_pretrained(TINY_DIR), AutoTokenizer.from_pretrained(TINY_DIR)
    tmp = run.begin_checkpoint(3)
    save_policy(model, tok, tmp)
    run.commit_checkpoint(tmp, 3, keep=2)
    run.append("metrics.jsonl", {"step": 3, "reward/mean": 0.5, "rollouts/cumulative": 96})
    from vigor_cli.console import console

    monkeypatch.setattr(console, "width", 80)  # as in a log file: the load line is one line to copy
    code, out, err = vigor("export", str(run.path), "--out", str(tmp_path / "export"))
    assert code == 0, err
    assert "step-3" in out and "Traceback" not in err
    assert f"load: AutoModelForCausalLM.from_pretrained('{tmp_path / 'export'}') or vllm serve {tmp_path / 'export'}\n" in out
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "export").eval()
    assert greedy(loaded, AutoTokenizer.from_pretrained(tmp_path / "export")) == greedy(model.eval(), tok, [2])
    assert gen_config_stops(tmp_path / "export") == [tok.eos_token_id]


# --------------------------------------------------------------------------- what a user meets first
def card_code(folder: Path) -> str:
    """The Python block of an exported folder's model card."""
    text = (folder / "README.md").read_text()
    return text.split("```python\n", 1)[1].split("```", 1)[0]


@slow
def test_an_export_is_readable_by_others_and_its_card_loads_it(runs, tmp_path, vigor, monkeypatch):
    """The files of an export are 0644 (the checkpoint's were written 0600), its folders 0755;
    the model card's load lines, run as written from the folder holding the export, load a model
    that generates as the export does; an ended run leaves no run.lock."""
    for name in ("full", "lora"):
        assert not (runs[name] / "run.lock").exists()
        out = tmp_path / f"{name}-model"
        code, _, err = vigor("export", str(runs[name]), "--out", str(out))
        assert code == 0, err
        assert stat.S_IMODE(out.stat().st_mode) == 0o755
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in out.rglob("*") if p.is_file()}
        assert modes and set(modes.values()) == {0o644}, modes
        weights_file = "model.safetensors" if name == "full" else "adapter_model.safetensors"
        assert weights_file in modes
        monkeypatch.chdir(tmp_path)
        scope: dict = {}
        exec(card_code(out), scope)  # noqa: S102 - the card this test's own export wrote
        model = scope["model"].eval()
        expected = exported(out) if name == "full" else exported_adapter(out, TINY_DIR)
        assert greedy(model, scope["tokenizer"]) == expected


def test_card_load_lines_name_each_kind_of_base(tmp_path):
    from vigor_cli.export.card import load_lines

    full = "\n".join(load_lines({"kind": "full", "base": {"where": "hub", "name_or_path": "Qwen/Qwen2.5-1.5B"}}, "m"))
    assert "AutoModelForCausalLM.from_pretrained(path)" in full and 'path = "m"' in full
    hub = "\n".join(load_lines({"kind": "adapter", "base": {"where": "hub", "name_or_path": "Qwen/Qwen2.5-1.5B",
                                                             "revision": "abc"}}, "m"))
    assert 'base_path = "Qwen/Qwen2.5-1.5B"' in hub and 'revision="abc"' in hub and "PeftModel" in hub
    local = "\n".join(load_lines({"kind": "adapter", "base": {"where": "local", "name_or_path": "../base"}}, "m"))
    assert 'os.path.join(path, "../base")' in local and local.startswith("import os")
    bundled = "\n".join(load_lines({"kind": "adapter", "base": {"where": "bundled", "name_or_path": "tiny"}}, "m"))
    assert "TINY_DIR as base_path" in bundled
    for code in (full, hub, local, bundled):
        compile(code, "card", "exec")


def test_an_export_folder_is_made_readable_whole(tmp_path):
    """What `vigor export` writes through its hidden folder comes out 0644/0755 whatever the
    writers made (the atomic writer's 0600, a private folder)."""
    from vigor_cli.export.folder import _write

    def fill(folder: Path) -> None:
        (folder / "sub").mkdir(mode=0o700)
        for p in (folder / "model.safetensors", folder / "sub" / "x.json"):
            p.write_text("{}")
            p.chmod(0o600)

    out = tmp_path / "out"
    _write(out, fill)
    assert {p.relative_to(out).as_posix(): stat.S_IMODE(p.stat().st_mode) for p in out.rglob("*")} == {
        "model.safetensors": 0o644, "sub": 0o755, "sub/x.json": 0o644}


def test_a_released_run_lock_can_take_its_file_with_it(tmp_path):
    from vigor_cli.run.directory import RunLock

    kept = RunLock.acquire(tmp_path / "kept.lock")
    kept.release()
    assert (tmp_path / "kept.lock").exists()  # a refusal or a resume's check leaves it
    ended = RunLock.acquire(tmp_path / "run.lock")
    ended.release(remove=True)
    assert not (tmp_path / "run.lock").exists()
    ended.release(remove=True)  # twice: nothing more
