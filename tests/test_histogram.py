"""Tests of the histogram-task experiment (attnphase/histogram_task/experiment.py)."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from attnphase.histogram_task import experiment as H

CPU = torch.device("cpu")


def test_targets_count_each_positions_token():
    x = np.array([[3, 1, 3, 3, 0], [0, 1, 2, 3, 4], [2, 2, 2, 2, 2]])
    expected = np.array([[3, 1, 3, 3, 1], [1, 1, 1, 1, 1], [5, 5, 5, 5, 5]])
    np.testing.assert_array_equal(H.histogram_targets(x), expected)


def test_dataset_counts_and_no_duplicates():
    # 3**4 = 81 possible sequences: asking for 60 forces many duplicate draws.
    cfg = H.HistogramConfig(L=4, T=3, n_sequences=60)
    data = H.make_dataset(cfg, seed=5)
    x = np.concatenate([data.x_train, data.x_val])
    y = np.concatenate([data.y_train, data.y_val])
    assert x.shape == (60, 4) and len(data.x_train) == 42  # 70/30 split
    assert len(np.unique(x, axis=0)) == 60
    assert x.min() >= 0 and x.max() < 3
    for seq, cnt in zip(x, y):
        assert [list(seq).count(t) for t in seq] == list(cnt)
    again = H.make_dataset(cfg, seed=5)
    np.testing.assert_array_equal(again.x_train, data.x_train)  # fixed seed: same dataset


def test_full_dataset_is_distinct_and_uniform():
    data = H.make_dataset(H.HistogramConfig(n_sequences=5000), seed=0)
    x = np.concatenate([data.x_train, data.x_val])
    assert len(np.unique(x, axis=0)) == 5000
    freq = np.bincount(x.ravel(), minlength=15) / x.size
    assert np.all(np.abs(freq - 1 / 15) < 0.01)
    assert data.y_train.max() <= 10 and data.y_train.min() >= 1


def test_too_many_sequences_is_an_error():
    with pytest.raises(ValueError, match="n_sequences"):
        H.sample_sequences(10, L=2, T=3, rng=np.random.default_rng(0))


@pytest.mark.parametrize("kind", ["only_sem", "only_pos"])
def test_restriction_is_exact(kind):
    torch.manual_seed(0)
    model = H.HistogramTransformer(T=15, L=10, attention=kind).eval()
    x = torch.randint(0, 15, (64, 10))
    a = model.attention_matrix(x)
    if kind == "only_pos":  # attention must not depend on the tokens at all
        torch.testing.assert_close(a, a[:1].expand_as(a), rtol=0, atol=0)
    else:  # same tokens in permuted positions -> permuted attention
        perm = torch.randperm(10)
        torch.testing.assert_close(model.attention_matrix(x[:, perm]), a[:, perm][:, :, perm], rtol=0, atol=1e-6)


@pytest.mark.parametrize("kind", ["only_sem", "only_pos"])
def test_reparameterisation_preserves_the_function(kind):
    torch.manual_seed(1)
    model = H.HistogramTransformer(T=15, L=10, attention=kind)
    with torch.no_grad():  # make the hidden columns non-zero so that dropping them matters
        for p in model.parameters():
            p.add_(0.5 * torch.randn_like(p))
    model.eval()
    both = H.reparameterise_to_both(model).eval()
    assert both.attention == "both" and torch.all(both.qk_mask == 1)
    x = torch.randint(0, 15, (256, 10))
    with torch.no_grad():
        torch.testing.assert_close(both(x), model(x), rtol=0, atol=1e-6)
        torch.testing.assert_close(both.attention_matrix(x), model.attention_matrix(x), rtol=0, atol=1e-6)
        # the naive lift (keep the weights, just drop the mask) is a different function
        naive = H.HistogramTransformer(T=15, L=10, attention="both").eval()
        state = dict(model.state_dict())
        state["qk_mask"] = torch.ones_like(state["qk_mask"])
        naive.load_state_dict(state)
        assert (naive(x) - model(x)).abs().max() > 1e-3


@pytest.fixture
def one_thread():
    """The model is tiny: extra threads only contend on a shared CPU."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def test_tiny_model_overfits_tiny_dataset(one_thread):
    cfg = H.HistogramConfig(L=6, T=5, n_sequences=120, d_model=32, d_mlp=64, batch_size=84, lr=1e-2)
    data = H.make_dataset(cfg, seed=0)
    H.seed_everything(0)
    model = H.HistogramTransformer(cfg.T, cfg.L, cfg.d_model, cfg.d_mlp, attention="only_sem")
    hist = H.train(model, data, 300, cfg, CPU, torch.Generator().manual_seed(0), progress=False)  # full batch
    xt, yt = (torch.as_tensor(a) for a in (data.x_train, data.y_train))
    assert H.accuracy(model, xt, yt) == 1.0
    assert hist[-1]["train_loss"] < 1e-3


def test_attention_scores_tell_kinds_apart():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 15, size=(300, 10))
    torch.manual_seed(0)
    pos = H.HistogramTransformer(15, 10, attention="only_pos")
    sem = H.HistogramTransformer(15, 10, attention="only_sem")
    with torch.no_grad():  # sharpen the attention so that it visibly depends on something
        for m in (pos, sem):
            m.W_q.weight.mul_(4)
    s_pos = H.attention_scores(pos, x, CPU)
    s_sem = H.attention_scores(sem, x, CPU)
    assert s_pos["semantic_mass"] < 1e-6 and s_pos["positional_mass"] > 0.05  # exact restriction
    assert s_sem["positional_mass"] < 1e-6 and s_sem["semantic_mass"] > 0.05
    assert s_pos["same_token_boost"] == pytest.approx(1.0, abs=1e-9)


def test_seed_everything_reproduces():
    H.seed_everything(3)
    a = (np.random.rand(), torch.rand(1).item())
    H.seed_everything(3)
    assert (np.random.rand(), torch.rand(1).item()) == a


def _cli(capsys, *argv):
    from attnphase.cli import main

    try:
        code = main(["histogram", *argv])
    except SystemExit as exc:  # argparse type errors
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("argv, flag", [
    (["--epochs", "0"], "--epochs"),
    (["--seeds", "-1"], "--seeds"),
    (["--models", "only_sem,nope"], "--models"),
    (["--n-sequences", "0"], "--n-sequences"),
    (["--continue-epochs", "-2"], "--continue-epochs"),
    (["--epochs", "abc"], "--epochs"),
])
def test_cli_bad_input_exits_2_with_one_line(capsys, argv, flag):
    code, out, err = _cli(capsys, *argv)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and flag in err
    assert out == ""


def test_cli_tiny_run_writes_json_and_figure(capsys, tmp_path, one_thread):
    code, out, err = _cli(capsys, "--quick", "--epochs", "1", "--continue-epochs", "1", "--seeds", "2", "--n-sequences", "400",
             "--models", "only_sem,only_pos,both", "--out", str(tmp_path), "--json")
    assert code == 0, err
    res = json.loads(out)
    assert set(res["models"]) == {"only_sem", "only_pos", "both"}
    for kind, rec in res["models"].items():
        assert 0 <= rec["val_acc_mean"] <= 1 and rec["val_acc_std"] >= 0 and len(rec["val_acc"]) == 2
        assert ("reparam" in rec) == (kind != "both")
    assert res["models"]["only_pos"]["reparam"]["max_abs_logit_diff"] < 1e-5
    assert (tmp_path / "histogram_attention.png").stat().st_size > 1000
    assert json.loads((tmp_path / "histogram.json").read_text())["models"].keys() == res["models"].keys()
