"""The scripts behind docs/written_questions.md show what the doc says: two heads average two
values with far less spread than one head (handout 1c/1d), and the perceiver's attention cost
grows linearly in the input length where vanilla's grows quadratically (2g ii), by operation
count (not wall time)."""
import importlib.util
import os
import types

import pytest
import torch

from support import REPO


def load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(REPO, 'scripts', 'written', name + '.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope='module')
def av():
    return load('attention_variance')


@pytest.fixture(scope='module')
def pc():
    return load('perceiver_complexity')


def test_keys_sampled_as_the_handout_says(av):
    gen = torch.Generator().manual_seed(1)
    mu = av.orthonormal(4, 8, gen)
    assert torch.allclose(mu @ mu.T, torch.eye(4, dtype=mu.dtype), atol=1e-10)
    alpha = 1e-4
    k = av.sample_keys(mu, 0, alpha, True, 40000, gen)
    cov_a = torch.cov((k[:, 0] - mu[0]).T)
    want_a = alpha * torch.eye(8, dtype=mu.dtype) + 0.5 * torch.outer(mu[0], mu[0])
    assert torch.allclose(cov_a, want_a, atol=0.02)
    cov_1 = torch.cov((k[:, 1] - mu[1]).T)
    assert torch.allclose(cov_1, alpha * torch.eye(8, dtype=mu.dtype), atol=2e-5)


def test_copy_and_average_sharpen_with_beta(av):
    rows = av.copy_and_average(betas=(1, 5, 20))
    copy_errs = [r[1] for r in rows]
    avg_errs = [r[2] for r in rows]
    assert copy_errs == sorted(copy_errs, reverse=True) and copy_errs[-1] < 1e-6
    assert avg_errs == sorted(avg_errs, reverse=True) and avg_errs[-1] < 1e-6
    assert copy_errs[0] > 0.1  # beta = 1 is no copy at all


def test_two_heads_spread_less_than_one(av):
    kw = dict(samples=4000, seed=3)
    one = av.stats(av.simulate(True, 1, **kw)[0])
    two = av.stats(av.simulate(True, 2, **kw)[0])
    # one head: c snaps to v_a or v_b (c_a near 0 or 1), so its spread is about |v_a - v_b|/2
    assert one['spread'] > 0.6 and one['near_half'] < 0.1
    # two heads: c stays near (v_a + v_b)/2 apart from the samples where q1^T k_a < 0
    assert two['spread'] < one['spread'] / 3
    assert two['near_half'] > 0.8
    # with only the small alpha I noise both get c close to the average
    for heads in (1, 2):
        s = av.stats(av.simulate(False, heads, **kw)[0])
        assert s['err'] < 0.05 and abs(s['mean_a'] - 0.5) < 0.01


def small_args(pc, **kw):
    args = dict(n_layer=4, n_head=4, n_embd=32, bottleneck_dim=16, vocab_size=64)
    args.update(kw)
    return types.SimpleNamespace(**args)


def test_flop_counts_match_the_complexity_formulas(pc):
    args = small_args(pc)
    for variant in ('vanilla', 'perceiver'):
        for length in (32, 64):
            mix, linear = pc.count_flops(variant, length, args)
            assert mix == pc.predicted_mix(variant, length, args) > 0
            assert linear == pc.predicted_linear(variant, length, args) > 0


def test_perceiver_cost_grows_slower_than_vanilla(pc):
    args = small_args(pc)
    lengths = (32, 64, 128)
    cost = {v: [pc.count_flops(v, l, args) for l in lengths] for v in ('vanilla', 'perceiver')}
    for i in range(1, len(lengths)):
        v_mix = cost['vanilla'][i][0] / cost['vanilla'][i - 1][0]
        p_mix = cost['perceiver'][i][0] / cost['perceiver'][i - 1][0]
        assert v_mix == pytest.approx(4.0)   # O(L l^2 d): doubling l quadruples it
        assert 1.0 < p_mix < 2.0             # O(l m d + (L-2) m^2 d): less than doubles
        v_tot = sum(cost['vanilla'][i]) / sum(cost['vanilla'][i - 1])
        p_tot = sum(cost['perceiver'][i]) / sum(cost['perceiver'][i - 1])
        assert p_tot < v_tot
        assert sum(cost['perceiver'][i]) < sum(cost['vanilla'][i])


def test_complexity_script_runs(pc, capsys):
    rows = pc.main(['--no_time', '--lengths', '32', '64', '--n_embd', '32', '--n_head', '4',
                    '--bottleneck_dim', '16'])
    out = capsys.readouterr().out
    assert 'counted FLOPs == the formulas in the docstring for every row: True' in out
    assert [r['l'] for r in rows] == [32, 64]
