"""The TRL path's update in token-budgeted micro-batches (vigor_cli/integrations/trl_update.py):
the gradient equals TRL's own loss over the update's rows alone, whatever the budget and the
loss type; the rows outside the update are not forwarded, neither in the update nor in the
scoring pass; every rank runs as many micro-batches; TRL's per-forward metrics become one
per optimizer step. On CPU with the bundled tiny model and TRL's real GRPOTrainer."""

from __future__ import annotations

import pytest

pytest.importorskip("trl")

import torch  # noqa: E402
from trl import GRPOTrainer  # noqa: E402

from test_trl_core import _trainer  # noqa: E402
from vigor_cli.integrations import trl_update  # noqa: E402


@pytest.fixture(scope="module")
def pods(tmp_path_factory):
    """One PODS step (8 generated, 2 kept per prompt, 2 prompts) replayed for the update."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as vigor sets it for a model this small (model.cpu_threads)
    tr = _trainer(tmp_path_factory.mktemp("pods"), vigor={"strategy": "pods", "pods_n": 8, "pods_m": 2},
                  max_completion_length=12)
    out = tr._generate_and_score_completions([])
    yield tr, out
    torch.set_num_threads(threads)


def _kept(out: dict) -> list[int]:
    mask = trl_update.loss_mask(out)
    return [i for i in range(len(mask)) if mask[i].any() and out["advantages"][i] != 0]


def _alone(out: dict, rows: list[int]) -> dict:
    """The replayed batch cut to ``rows`` with TRL's token count of those rows."""
    alone = trl_update.slice_rows(out, rows)
    alone["num_items_in_batch"] = trl_update.loss_mask(out)[rows].sum()
    return alone


def _gradient(tr, fn) -> torch.Tensor:
    tr.model.zero_grad(set_to_none=True)
    loss = fn()
    loss.backward()
    return loss.detach(), torch.cat([p.grad.flatten() for p in tr.model.parameters() if p.grad is not None])


@pytest.mark.parametrize("loss_type, budget", [("dapo", 100_000), ("dapo", 40), ("grpo", 40), ("dr_grpo", 40),
                                               ("bnpo", 40)])
def test_micro_batched_gradient_equals_trls_loss_over_the_update_rows_alone(pods, loss_type, budget):
    """The rank's micro-batches (one, or several at 40 tokens) add up to the gradient and
    loss TRL computes over the kept rows as one batch; the left-out rows change nothing."""
    tr, out = pods
    kept = _kept(out)
    assert 0 < len(kept) < len(out["advantages"])  # PODS left rows out: the comparison means something
    tr.loss_type = loss_type
    tr.args.micro_batch_tokens = budget
    try:
        want_loss, want = _gradient(tr, lambda: GRPOTrainer._compute_loss(tr, tr.model, _alone(out, kept)))
        got_loss, got = _gradient(tr, lambda: tr.compute_loss(tr.model, out))
    finally:
        tr.loss_type, tr.args.micro_batch_tokens = "dapo", 8192
    assert float(want.abs().max()) > 1e-6  # a real gradient
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-7)
    assert float(got_loss) == pytest.approx(float(want_loss), abs=1e-6)
    prompts, completions = trl_update.row_sizes(out)
    split = trl_update.token_budget_split(kept, prompts, completions, budget)
    assert tr.vigor_update.micro_batches == len(split) and (len(split) == 1) is (budget > 1000)
    assert tr.vigor_update.forwarded == len(kept)


def test_rows_outside_the_update_are_not_forwarded_and_forwards_keep_the_budget(pods):
    tr, out = pods
    seen: list[tuple[int, int]] = []
    real = tr.model.forward

    def forward(*args, **kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        seen.append(tuple(ids.shape))
        return real(*args, **kwargs)

    tr.model.forward = forward
    tr.args.micro_batch_tokens = 64
    try:
        tr.compute_loss(tr.model, out)
    finally:
        tr.model.forward = real
        tr.args.micro_batch_tokens = 8192
    kept = _kept(out)
    assert sum(rows for rows, _ in seen) == len(kept) < len(out["advantages"])
    prompts, completions = trl_update.row_sizes(out)
    assert all(rows * width <= 64 or rows == 1 for rows, width in seen)
    assert max(width for _, width in seen) == max(prompts[i] + completions[i] for i in kept)  # trimmed padding


@pytest.mark.slow
def test_the_scoring_pass_forwards_the_update_rows_only_with_the_same_log_probs(tmp_path):
    """beta > 0: the reference's log-probs of the update's rows equal TRL's over the whole
    batch; the other rows are not forwarded (zeros, under a zero loss mask)."""
    tr = _trainer(tmp_path, vigor={"strategy": "pods", "pods_n": 8, "pods_m": 2}, beta=0.04)
    calls: list[int] = []
    parent = GRPOTrainer._get_per_token_logps_and_entropies

    def counting(self, model, input_ids, *args, **kwargs):
        calls.append(input_ids.shape[0])
        return parent(self, model, input_ids, *args, **kwargs)

    GRPOTrainer._get_per_token_logps_and_entropies = counting
    try:
        out = tr._generate_and_score_completions([])
    finally:
        GRPOTrainer._get_per_token_logps_and_entropies = parent
    mask = trl_update.loss_mask(out)
    used = [i for i in range(len(mask)) if mask[i].any()]
    assert sum(calls) == len(used) == 4 < len(mask)  # beta > 0: every update row, no other
    ids = torch.cat([out["prompt_ids"], out["completion_ids"]], 1)
    attention = torch.cat([out["prompt_mask"], out["completion_mask"]], 1)
    with torch.no_grad():
        whole, _, _ = parent(tr, tr.ref_model, ids, attention, out["completion_ids"].shape[1])
    assert torch.allclose(out["ref_per_token_logps"][used] * mask[used], whole[used] * mask[used], atol=1e-5)
    others = [i for i in range(len(mask)) if i not in used]
    assert not out["ref_per_token_logps"][others].any()


def test_token_budget_split_by_hand():
    prompts, completions = [4, 4, 2, 6], [4, 1, 2, 10]
    # longest first: row 3 (16), row 0 (8), row 1 (5), row 2 (4)
    assert trl_update.token_budget_split([0, 1, 2, 3], prompts, completions, 16) == [[3], [0, 1], [2]]
    assert trl_update.token_budget_split([0, 1, 2], prompts, completions, 8) == [[0], [1], [2]]
    assert trl_update.token_budget_split([0, 2], prompts, completions, 1000) == [[0, 2]]
    assert trl_update.token_budget_split([], prompts, completions, 10) == []


def test_slice_rows_trims_each_padded_side_to_the_rows_longest():
    inputs = {
        "prompt_ids": torch.tensor([[0, 0, 5, 6], [0, 7, 8, 9], [1, 2, 3, 4]]),
        "prompt_mask": torch.tensor([[0, 0, 1, 1], [0, 1, 1, 1], [1, 1, 1, 1]]),
        "completion_ids": torch.tensor([[1, 2, 0], [3, 0, 0], [4, 5, 6]]),
        "completion_mask": torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1]]),
        "advantages": torch.tensor([0.5, -1.0, 2.0]),
        "num_items_in_batch": torch.tensor(6),
    }
    out = trl_update.slice_rows(inputs, [0, 1])
    assert out["prompt_ids"].tolist() == [[0, 5, 6], [7, 8, 9]] and out["prompt_mask"].tolist() == [[0, 1, 1], [1, 1, 1]]
    assert out["completion_ids"].tolist() == [[1, 2], [3, 0]] and out["advantages"].tolist() == [0.5, -1.0]
    assert int(out["num_items_in_batch"]) == 6  # the global count is not a row's
    filler = trl_update.slice_rows(inputs, [2], zero_mask=True)
    assert not filler["completion_mask"].any() and not filler["advantages"].any()


def test_every_rank_runs_as_many_micro_batches_the_fillers_move_nothing(pods):
    """Another rank (seen through the gather) needs 5 micro-batches: this rank pads its own
    with fillers, and the normaliser counts both ranks' rows."""
    tr, out = pods
    kept = _kept(out)
    mask = trl_update.loss_mask(out)
    counted = int((mask.sum(-1) > 0).sum())

    def gather(t):
        other = t.clone()
        if t.dim() == 1:
            other[0], other[1] = 5, 3  # five micro-batches, three rows with loss tokens
        else:
            other.fill_(2.0)  # two tokens and two rows in each of its micro-batches
        return torch.cat([t.flatten(), other.flatten()])

    plan = trl_update.plan_update(out, 0.0, 10_000, gather, 2)
    assert len(plan.batches) == 5 and plan.batches[0] == sorted(kept, key=lambda i: -int(out["completion_mask"][i].sum())
                                                               - int(out["prompt_mask"][i].sum()))
    assert plan.batches[1:] == [[]] * 4 and plan.rows == counted + 3
    assert plan.tokens[0] == float(mask.sum()) + 2 and plan.tokens[1:] == [2.0] * 4
    assert trl_update.batch_scale("grpo", kept, plan, out, 2) == pytest.approx(len(kept) * 2 / (counted + 3))
    filler = trl_update.slice_rows(out, [0], zero_mask=True)
    _, grad = _gradient(tr, lambda: GRPOTrainer._compute_loss(tr, tr.model, filler) + 0 * sum(
        p.sum() for p in tr.model.parameters()))
    assert not grad.any()


def test_each_micro_batch_has_the_rows_of_the_rank_with_most_and_the_loss_is_unchanged(pods):
    """TRL gathers one value per row in each forward (the clip fractions' extremes), so every
    rank's k-th micro-batch holds as many rows as the rank with most: padded with rows that carry
    no loss token, whose loss, rescaled, equals the unpadded one."""
    tr, out = pods
    kept = _kept(out)

    def gather(t):
        other = t.clone()
        if t.dim() == 1:
            other[0], other[1] = 1, 3
        else:
            other[0, 2, 0] = len(kept) + 3  # the other rank's one micro-batch has three rows more
        return torch.cat([t.flatten(), other.flatten()])

    plan = trl_update.plan_update(out, 0.0, 10_000, gather, 2)
    assert plan.widths == [len(kept) + 3]
    padded = trl_update.slice_rows(out, kept, fillers=3)
    plain = trl_update.slice_rows(out, kept)
    assert padded["completion_mask"].shape[0] == len(kept) + 3 and not padded["completion_mask"][-3:].any()
    assert not padded["advantages"][-3:].any()
    saved = tr.loss_type
    try:
        for tr.loss_type in ("dapo", "grpo", "dr_grpo", "bnpo"):
            with torch.no_grad():
                a = GRPOTrainer._compute_loss(tr, tr.model, padded) * trl_update.batch_scale(
                    tr.loss_type, kept, plan, out, 2, len(kept) + 3)
                b = GRPOTrainer._compute_loss(tr, tr.model, plain) * trl_update.batch_scale(
                    tr.loss_type, kept, plan, out, 2)
            assert float(a) == pytest.approx(float(b), rel=1e-5, abs=1e-7), tr.loss_type
    finally:
        tr.loss_type = saved


def test_trls_per_forward_metrics_become_one_per_step_weighted_by_tokens():
    metrics = {"kl": [9.0, 0.1, 0.4], "clip_ratio/low_mean": [0.5, 0.0], "clip_ratio/high_max": [0.2, float("nan")],
               "entropy": [1.0, 3.0]}
    plan = trl_update.Plan([[0], [1]], rows=4, rank_tokens=10, tokens=[30.0, 10.0], units=[1.0, 3.0])
    merged = trl_update.merge_metrics(metrics, {"kl": 1}, plan, sequence_level=False)
    assert metrics["kl"] == [9.0, pytest.approx(0.175)]  # the earlier step's value is kept
    assert merged["clip_ratio/low_mean"] == pytest.approx(0.375) and merged["clip_ratio/high_max"] == 0.2
    assert merged["entropy"] == pytest.approx(1.5)
    seq = trl_update.merge_metrics({"clip_ratio/low_mean": [0.5, 0.0], "kl": [1.0, 0.0]}, {}, plan, sequence_level=True)
    assert seq["clip_ratio/low_mean"] == pytest.approx(0.125) and seq["kl"] == pytest.approx(0.75)


def test_the_row_normaliser_counts_rows_with_loss_tokens_not_rows_in_the_update(pods):
    """grpo.mask_truncated zeroes a truncated row's loss mask (TRL's completion mask): vigor
    train's grpo and dr_grpo count the rows left (StepTotals.sequences), and so does the TRL
    path's rescale now (it counted every row of the update)."""
    tr, out = pods
    kept = _kept(out)
    cut = dict(out)
    cut["completion_mask"] = out["completion_mask"].clone()
    cut["completion_mask"][kept[0]] = 0  # as TRL masks a truncated completion
    plan = trl_update.plan_update(cut, 0.0, 10_000, lambda t: t.flatten(), 1)
    assert plan.rows == len(kept) - 1 and kept[0] not in plan.batches[0]
    assert trl_update.batch_scale("grpo", plan.batches[0], plan, cut, 1) == 1.0


def test_gspo_clip_fractions_count_the_rows_with_loss_tokens_not_the_fillers(pods):
    """At the sequence level (GSPO) TRL divides its clip fractions by every row forwarded, the
    filler rows a rank adds to match the rank with most included; merged, they equal TRL's
    over the real rows alone (they were diluted by the padding)."""
    tr, out = pods
    kept = _kept(out)
    signs = [float(out["advantages"][i]) < 0 for i in kept]
    assert any(signs) and not all(signs)  # some rows are clipped and some are not: the share means something
    inputs = dict(out)
    inputs["old_per_token_logps"] = torch.zeros_like(out["completion_mask"], dtype=torch.float32)  # ratio << 0.8
    saved = tr.importance_sampling_level, tr.loss_type
    tr.importance_sampling_level, tr.loss_type = "sequence", "dapo"
    try:
        def trl_metrics(batch):
            tr._metrics["train"].clear()
            with torch.no_grad():
                GRPOTrainer._compute_loss(tr, tr.model, batch)
            return {k: list(v) for k, v in tr._metrics["train"].items()}

        alone = trl_metrics(trl_update.slice_rows(inputs, kept))
        padded = trl_metrics(trl_update.slice_rows(inputs, kept, fillers=3))
        assert padded["clip_ratio/low_mean"][0] < alone["clip_ratio/low_mean"][0]  # TRL's: diluted by 3 rows
        assert padded["clip_ratio/low_min"][0] == 0.0
        plan = trl_update.Plan([kept], rows=len(kept), rank_tokens=1.0, tokens=[1.0], units=[float(len(kept))],
                               widths=[len(kept) + 3], forwarded=[float(len(kept) + 3)])
        merged = trl_update.merge_metrics(padded, {}, plan, sequence_level=True)
        assert merged["clip_ratio/low_mean"] == pytest.approx(alone["clip_ratio/low_mean"][0])
        assert 0 < merged["clip_ratio/low_mean"] < 1
        assert merged["clip_ratio/region_mean"] == pytest.approx(alone["clip_ratio/region_mean"][0])
        assert merged["clip_ratio/high_mean"] == alone["clip_ratio/high_mean"][0] == 0.0
        # every real row clipped: the fillers' zeros no longer hide it from the minimum
        every = trl_update.Plan([kept], rows=1, rank_tokens=1.0, tokens=[1.0], units=[1.0], widths=[4], forwarded=[4.0])
        m = trl_update.merge_metrics({"clip_ratio/low_mean": [0.25], "clip_ratio/low_min": [0.0]}, {}, every, True)
        assert m["clip_ratio/low_mean"] == 1.0 and m["clip_ratio/low_min"] == 1.0
        # token level: TRL's token mask already leaves the fillers out, nothing is rescaled
        tok = trl_update.merge_metrics({"clip_ratio/low_mean": [0.25]}, {}, every, sequence_level=False)
        assert tok["clip_ratio/low_mean"] == 0.25
    finally:
        tr.importance_sampling_level, tr.loss_type = saved
        tr._metrics["train"].clear()
