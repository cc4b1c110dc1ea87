"""Dashboards (`train.report_to`, vigor_cli/run/tracking.py): TensorBoard event files read back with
tensorboard's own reader, a W&B offline run written without network, trackio's store, the
config key and flag, and a missing package refused in one line.

The real-training tests (slow) train the tiny model for a few steps with every backend on and
read each backend's files back; the fast ones drive :class:`Trackers` with metrics lines.
"""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import socket
import struct
from pathlib import Path

import pytest

from vigor_cli.run import tracking
from vigor_cli.settings import build_config
from vigor_cli.errors import UserError
from vigor_cli.run.tracking import Trackers


def tb_scalars(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar in the event files under ``log_dir``, read with tensorboard's own reader."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def tb_texts(log_dir: Path, tag: str) -> dict[int, str]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir), size_guidance={"tensors": 0})
    acc.Reload()
    return {e.step: e.tensor_proto.string_val[0].decode() for e in acc.Tensors(f"{tag}/text_summary")}


def wandb_history(run_file: Path) -> dict[int, dict[str, float]]:
    """The history records of an offline ``run-<id>.wandb`` file, by step.

    The file is W&B's transaction log: a 7-byte header (':W&B', magic, version), then
    LevelDB-log records in 32 KiB blocks (crc32, length, type; FULL/FIRST/MIDDLE/LAST), each
    payload a ``wandb_internal_pb2.Record``. wandb 0.31 ships no Python reader, so this is one.
    """
    from wandb.proto import wandb_internal_pb2 as pb

    data = run_file.read_bytes()
    assert data[:4] == b":W&B"
    block, pos, payload, history = 32768, 7, b"", {}
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        payload += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL or LAST: a whole record
            record = pb.Record()
            record.ParseFromString(payload)
            payload = b""
            if record.WhichOneof("record_type") == "history":
                items = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item}
                history.setdefault(int(items.get("_step", record.history.step.num)), {}).update(items)
        elif kind == 0:
            break  # zero padding at the end
    return history


def lines(steps: int = 3) -> list[dict]:
    """metrics.jsonl lines as the trainer writes them: eval at 0, then training + eval."""
    out = [{"step": 0, "eval/accuracy": 0.25, "eval/tiny-math/accuracy": 0.25, "eval/samples": 8,
            "rollouts/cumulative": 0, "tokens/cumulative": 0, "time/elapsed": 0.1}]
    for s in range(1, steps + 1):
        out.append({"step": s, "reward/mean": 0.1 * s, "rollouts/cumulative": 16 * s,
                    "engine/weight_check": None, "lr": 1e-3, "time/generate": 0.5})
        out.append({"step": s, "eval/accuracy": 0.25 + 0.1 * s, "rollouts/cumulative": 16 * s})
    return out


# --------------------------------------------------------------------------- the key and flag
def test_report_to_key_accepts_names_lists_and_none():
    assert build_config(sets=["train.report_to=tensorboard"]).train.report_to == ["tensorboard"]
    assert build_config(sets=["train.report_to=tensorboard,wandb"]).train.report_to == ["tensorboard", "wandb"]
    assert build_config(sets=["train.report_to=[trackio, wandb]"]).train.report_to == ["trackio", "wandb"]
    assert build_config(sets=["train.report_to=none"]).train.report_to == []
    assert build_config().train.report_to == []
    assert set(tracking.names()) == {"tensorboard", "wandb", "trackio"}


@pytest.mark.parametrize("args, needle", [
    (["--report-to", "mlflow"], "--report-to mlflow (train.report_to): bad value for 'train.report_to': unknown backend 'mlflow'"),
    (["--report-to", "none,wandb"], "'none' turns dashboards off"),
    (["--set", "train.report_to=[3]"], "train.report_to"),
])
def test_bad_report_to_is_one_line_exit_2(vigor, tmp_path, args, needle):
    code, out, err = vigor("train", "--output-dir", str(tmp_path), *args)
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1
    assert not any(tmp_path.iterdir())  # no run directory left


def test_missing_backend_package_is_one_line_exit_2(vigor, tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    code, out, err = vigor("train", "--output-dir", str(tmp_path), "--run-name", "r", "--steps", "1",
                           "--report-to", "tensorboard,wandb")
    assert code == 2
    assert err.strip() == ("error: train.report_to=wandb: the wandb package is not installed; "
                           "pip install 'vigor[wandb]' (or drop wandb from --report-to)")
    assert "memory plan" not in out  # refused before anything slow
    assert not (tmp_path / "r").exists()
    # the TRL path refuses it the same way before building anything
    from vigor_cli.integrations.trl import trl_args

    with pytest.raises(UserError, match=r"train.report_to=wandb: the wandb package is not installed"):
        trl_args(build_config(sets=["train.report_to=wandb"]), tmp_path / "trl")


def test_trl_path_forwards_the_choice():
    from vigor_cli.integrations.trl import trl_args

    args = trl_args(build_config(sets=["train.report_to=tensorboard"]), "unused-dir", use_cpu=True)
    assert args.report_to == ["tensorboard"]
    assert trl_args(build_config(), "unused-dir", use_cpu=True).report_to in ([], "none", ["none"])


# --------------------------------------------------------------------------- tensorboard
def test_tensorboard_holds_every_line_and_a_resume_logs_each_step_once(tmp_path):
    run = tmp_path / "run"
    t = Trackers(["tensorboard"], run, "run", {"train": {"seed": 0}})
    for row in lines(3):
        t.log_metrics(row)
    t.log_completions(2, [{"prompt": "1+1", "text": "\\boxed{2} | ok", "reward": 1.0, "advantage": 0.5},
                          {"prompt": "1+2", "text": "env failed", "reward": None, "advantage": 0.0}])  # unscored
    t.close()
    t.close()  # twice is safe
    got = tb_scalars(run / "tensorboard")
    assert got["reward/mean"] == [(1, pytest.approx(0.1)), (2, pytest.approx(0.2)), (3, pytest.approx(0.3))]
    assert [s for s, _ in got["eval/accuracy"]] == [0, 1, 2, 3]
    assert "engine/weight_check" not in got  # null values are left out, as in a plot of the JSONL
    table = tb_texts(run / "tensorboard", "completions")[2]
    assert "| step | prompt | completion | reward | advantage |" in table and "\\boxed{2} \\| ok" in table
    assert "env failed | nan |" in table

    # a resumed session from a step-1 checkpoint re-runs steps 2..3: each appears once, new values
    t = Trackers(["tensorboard"], run, "run")
    for row in lines(3)[3:]:
        t.log_metrics({**row, "reward/mean": row["reward/mean"] + 1} if "reward/mean" in row else row)
    t.close()
    got = tb_scalars(run / "tensorboard")
    assert got["reward/mean"] == [(1, pytest.approx(0.1)), (2, pytest.approx(1.2)), (3, pytest.approx(1.3))]


def test_nothing_starts_before_the_first_line(tmp_path):
    t = Trackers(["tensorboard"], tmp_path / "run", "run")
    t.close()  # a run that failed while loading
    assert not (tmp_path / "run").exists()
    assert not Trackers([], tmp_path, "x")  # no backend: falsy, and logging is a no-op
    Trackers([], tmp_path, "x").log_metrics({"step": 1, "reward/mean": 1.0})


def test_a_backend_that_fails_to_close_is_a_warning_and_the_others_still_close(tmp_path, monkeypatch):
    class Broken(tracking.Tracker):
        name, package = "broken", "json"

        def start(self, first_step):
            pass

        def log(self, scalars, step):
            pass

        def close(self):
            raise RuntimeError("disk went away\nmore detail")

    monkeypatch.setitem(tracking.BACKENDS, "broken", Broken)
    said: list[str] = []
    t = Trackers(["broken", "tensorboard"], tmp_path / "run", "run", announce=said.append)
    t.log_metrics({"step": 1, "reward/mean": 0.5})
    t.close()
    assert said[-1] == "warning: broken did not close cleanly (disk went away); metrics.jsonl is complete"
    assert tb_scalars(tmp_path / "run" / "tensorboard")["reward/mean"] == [(1, 0.5)]  # flushed and closed


# --------------------------------------------------------------------------- wandb
def _no_network(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("tried the network")

    monkeypatch.setattr(socket, "create_connection", refuse)


def test_wandb_mode_never_probes_without_a_key_or_with_wandb_mode(monkeypatch, tmp_path):
    _no_network(monkeypatch)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc
    monkeypatch.delenv("NETRC", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert tracking.wandb_mode() == ("offline", "WANDB_MODE")
    monkeypatch.delenv("WANDB_MODE")
    mode, why = tracking.wandb_mode()
    assert mode == "offline" and "no W&B API key" in why


def test_wandb_mode_goes_offline_when_the_server_does_not_answer(monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # the discard port: refused here

    def refused(*a, **k):
        raise ConnectionRefusedError

    monkeypatch.setattr(socket, "create_connection", refused)
    assert tracking.wandb_mode() == ("offline", "127.0.0.1 cannot be reached")


@pytest.fixture
def offline_env(tmp_path, monkeypatch):
    """W&B offline in a temporary folder, trackio in another; the network refused outright."""
    _no_network(monkeypatch)
    for key in ("WANDB_API_KEY", "WANDB_PROJECT", "TRACKIO_PROJECT"):
        monkeypatch.delenv(key, raising=False)
    dirs = {"WANDB_DIR": tmp_path / "wandb-dir", "WANDB_CONFIG_DIR": tmp_path / "wandb-config",
            "WANDB_CACHE_DIR": tmp_path / "wandb-cache", "WANDB_DATA_DIR": tmp_path / "wandb-data",
            "TRACKIO_DIR": tmp_path / "trackio"}
    for key, path in dirs.items():
        path.mkdir()
        monkeypatch.setenv(key, str(path))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    return dirs


def _offline_run(wandb_dir: Path) -> Path:
    runs = glob.glob(str(wandb_dir / "wandb" / "offline-run-*"))
    assert len(runs) == 1, runs
    return Path(runs[0])


@pytest.mark.slow  # wandb starts its service process (wandb-core): a few seconds
def test_wandb_offline_run_directory_is_written_without_network(offline_env, tmp_path):
    t = Trackers(["wandb"], tmp_path / "run", "run", {"train": {"seed": 0}})
    for row in lines(3):
        t.log_metrics(row)
    t.log_completions(3, [{"prompt": "1+1", "text": "\\boxed{2}", "reward": 1.0, "advantage": 0.5}])
    t.close()
    run = _offline_run(offline_env["WANDB_DIR"])
    history = wandb_history(next(run.glob("run-*.wandb")))
    assert {s: h["reward/mean"] for s, h in history.items() if "reward/mean" in h} == pytest.approx(
        {1: 0.1, 2: 0.2, 3: 0.3})
    assert sorted(s for s, h in history.items() if "eval/accuracy" in h) == [0, 1, 2, 3]
    table = json.loads(next(run.glob("files/media/table/completions_*.table.json")).read_text())
    assert table["columns"] == tracking.COMPLETION_COLUMNS and table["data"][0][2] == "\\boxed{2}"


# --------------------------------------------------------------------------- real training
def tiny_sets(tmp_path: Path, name: str, *extra: str) -> list[str]:
    """A few quick steps of the tiny model on tiny-math, full fine-tuning, the HF engine."""
    return [
        "model.name_or_path=tiny", "model.lora.enabled=false", "task.name=tiny-math",
        "train.prompts_per_step=4", "train.eval_limit=6", "train.log_completions_every=1",
        "sampling.max_new_tokens=8", "allocation.group_size=4", "allocation.rollouts_per_prompt=4",
        "task.max_prompt_tokens=32", "engine.kind=hf", "train.reward_workers=1",
        f"train.output_dir={tmp_path}", f"train.run_name={name}", *extra,
    ]


def quiet():
    from rich.console import Console

    return Console(file=open(os.devnull, "w"))


@pytest.fixture
def trained(offline_env, tmp_path):
    """A real 3-step run of the tiny model with every backend on, resumed once from step 1:
    (run directory, the dashboards' folders)."""
    from vigor_cli.train.trainer import Trainer, train

    sets = tiny_sets(tmp_path, "r", "train.steps=3", "train.save_every=1", "train.eval_every=1",
                     "train.keep_checkpoints=3", "train.report_to=[tensorboard, wandb, trackio]")
    original = Trainer.train_step

    def stop_at_two(self, step):
        if step == 2:
            raise KeyboardInterrupt  # killed after the step-1 checkpoint
        return original(self, step)

    Trainer.train_step = stop_at_two
    try:
        with pytest.raises(KeyboardInterrupt):
            train(build_config(sets=sets), out=quiet())
    finally:
        Trainer.train_step = original
    train(resume=tmp_path / "r", out=quiet())
    return tmp_path / "r", offline_env


@pytest.mark.slow
def test_a_real_run_reaches_every_dashboard(trained):
    run, dirs = trained
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    train_rows = {r["step"]: r for r in rows if "reward/mean" in r}
    assert sorted(train_rows) == [1, 2, 3]
    # tensorboard: reward/mean at every step, each once although step 2 was started twice
    tb = tb_scalars(run / "tensorboard")
    assert tb["reward/mean"] == [(s, pytest.approx(train_rows[s]["reward/mean"])) for s in (1, 2, 3)]
    for key in ("groups/zero_var_frac", "time/generate", "losses/loss", "rollouts/step"):
        assert [s for s, _ in tb[key]] == [1, 2, 3], key
    # the evaluation lines' copy of the cumulative counts adds no second point at a step
    assert tb["rollouts/cumulative"] == [(s, float(train_rows[s]["rollouts/cumulative"]) if s else 0.0)
                                        for s in (0, 1, 2, 3)]
    assert [s for s, _ in tb["eval/accuracy"]] == [0, 1, 2, 3]
    assert set(tb_texts(run / "tensorboard", "completions")) == {1, 2, 3}
    # wandb: two offline runs (the first session and the resumed one), the history in them
    runs = sorted(glob.glob(str(dirs["WANDB_DIR"] / "wandb" / "offline-run-*")))
    assert len(runs) == 2
    seen: dict[int, float] = {}
    for r in runs:
        for step, items in wandb_history(next(Path(r).glob("run-*.wandb"))).items():
            if "reward/mean" in items:
                seen[step] = items["reward/mean"]
    assert seen == pytest.approx({s: train_rows[s]["reward/mean"] for s in (1, 2, 3)})
    # trackio: one run, continued by the resumed session
    os.environ["TRACKIO_DIR"] = str(dirs["TRACKIO_DIR"])
    from trackio.sqlite_storage import SQLiteStorage

    logs = SQLiteStorage.get_logs("vigor", "r")
    rewards = {int(entry["step"]): entry["reward/mean"] for entry in logs if entry.get("reward/mean") is not None}
    assert set(rewards) == {1, 2, 3}
    assert rewards[3] == pytest.approx(train_rows[3]["reward/mean"])


def test_train_help_names_the_extra_to_install(vigor):
    """--report-to's help says which extra to install; rich read '[tensorboard]' in
    "pip install 'vigor[tensorboard]'" as markup and printed "pip install 'vigor'"."""
    code, out, _ = vigor("train", "--help")
    assert code == 0
    text = " ".join(out.replace("│", " ").split())
    assert "pip install 'vigor[tensorboard]'" in text and "pip install 'vigor'." not in text
