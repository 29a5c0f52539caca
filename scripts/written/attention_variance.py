"""Handout question 1 (2021-22 edition), numerically: attention copying and averaging (1a, 1b),
and why two heads average two values more reliably than one (1c, 1d).

    python scripts/written/attention_variance.py                 # defaults: n=8 keys in d=32, beta=30
    python scripts/written/attention_variance.py --samples 20000 --beta 50

Setup, as in the handout: keys k_i ~ N(mu_i, Sigma_i) with orthonormal means mu_i (known) and
unknown covariances, values v_i, and c = sum_i softmax(k^T q)_i v_i. The values are one-hot
(v_i = e_i), so c *is* the vector of attention weights and c_a, c_b are the weights on a and b;
the target is c = (v_a + v_b)/2, i.e. c_a = c_b = 0.5.
  small:  Sigma_i = alpha I for every i, alpha vanishingly small (1c i, 1d i)
  large:  Sigma_a = alpha I + 1/2 mu_a mu_a^T, Sigma_i = alpha I for i != a (1c ii, 1d ii)
One head uses q = beta (mu_a + mu_b); two heads use q1 = beta mu_a, q2 = beta mu_b and
c = (c1 + c2)/2. "spread" is sqrt(E||c - E c||^2), the total standard deviation of c over the
sampled keys; "err" is E||c - (v_a + v_b)/2||.
"""
import argparse
import math

import torch


def orthonormal(n, d, gen):
    """n orthonormal vectors in R^d (rows), from the QR decomposition of a Gaussian matrix."""
    q, _ = torch.linalg.qr(torch.randn(d, n, generator=gen, dtype=torch.float64))
    return q.T.contiguous()


def sample_keys(mu, a, alpha, large, samples, gen):
    """(samples, n, d) keys: mu_i + sqrt(alpha) z, and for key a under `large` also
    + sqrt(1/2) g mu_a with g ~ N(0, 1), so that Cov(k_a) = alpha I + 1/2 mu_a mu_a^T."""
    n, d = mu.shape
    k = mu + math.sqrt(alpha) * torch.randn(samples, n, d, generator=gen, dtype=torch.float64)
    if large:
        g = torch.randn(samples, 1, generator=gen, dtype=torch.float64)
        k[:, a] += math.sqrt(0.5) * g * mu[a]
    return k


def attend(keys, q):
    """c for each sample, with one-hot values: the softmax weights themselves. q: (d,)."""
    return torch.softmax(keys @ q, dim=-1)


def simulate(large, heads, n=8, d=32, a=0, b=1, alpha=1e-6, beta=30.0, samples=10000, seed=0):
    """Returns (c, keys, mu): c of shape (samples, n) for the handout's queries."""
    gen = torch.Generator().manual_seed(seed)
    mu = orthonormal(n, d, gen)
    keys = sample_keys(mu, a, alpha, large, samples, gen)
    if heads == 1:
        c = attend(keys, beta * (mu[a] + mu[b]))
    elif heads == 2:
        c = 0.5 * (attend(keys, beta * mu[a]) + attend(keys, beta * mu[b]))
    else:
        raise ValueError('heads must be 1 or 2')
    return c, keys, mu


def stats(c, a=0, b=1):
    n = c.size(1)
    target = torch.zeros(n, dtype=c.dtype)
    target[a] = target[b] = 0.5
    spread = math.sqrt(((c - c.mean(0)) ** 2).sum(1).mean().item())
    err = (c - target).norm(dim=1).mean().item()
    near = ((c[:, a] - 0.5).abs() < 0.1).double().mean().item()
    return dict(mean_a=c[:, a].mean().item(), mean_b=c[:, b].mean().item(),
                std_a=c[:, a].std().item(), spread=spread, err=err, near_half=near)


def copy_and_average(n=8, d=32, betas=(1, 2, 5, 10, 20), seed=0):
    """1a/1b: orthonormal keys, random values. q = beta k_j copies v_j; q = beta (k_a + k_b)
    averages v_a and v_b; both errors vanish as beta grows. Rows: (beta, copy err, avg err)."""
    gen = torch.Generator().manual_seed(seed)
    k = orthonormal(n, d, gen)
    v = torch.randn(n, d, generator=gen, dtype=torch.float64)
    rows = []
    for beta in betas:
        c_copy = torch.softmax(k @ (beta * k[2]), dim=0) @ v
        c_avg = torch.softmax(k @ (beta * (k[0] + k[1])), dim=0) @ v
        rows.append((beta, (c_copy - v[2]).norm().item() / v[2].norm().item(),
                     (c_avg - 0.5 * (v[0] + v[1])).norm().item() / (0.5 * (v[0] + v[1])).norm().item()))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--n', type=int, default=8, help='number of keys')
    ap.add_argument('--d', type=int, default=32, help='key dimension')
    ap.add_argument('--alpha', type=float, default=1e-6, help='the "vanishingly small" variance')
    ap.add_argument('--beta', type=float, default=30.0, help='the "large scalar" in the queries')
    ap.add_argument('--samples', type=int, default=10000)
    ap.add_argument('--seed', type=int, default=0)
    args = ap.parse_args(argv)

    print('1a/1b: orthonormal keys, random values; relative error of c')
    print(f'{"beta":>6}  {"q = beta k_j: |c - v_j|":>24}  {"q = beta (k_a + k_b): |c - (v_a+v_b)/2|":>40}')
    for beta, e_copy, e_avg in copy_and_average(args.n, args.d):
        print(f'{beta:6g}  {e_copy:24.2e}  {e_avg:40.2e}')

    print()
    print(f'1c/1d: n={args.n} keys in d={args.d}, alpha={args.alpha:g}, beta={args.beta:g}, '
          f'{args.samples} samples of the keys; target c_a = c_b = 0.5')
    print(f'{"covariance":<34} {"heads":>5} {"E c_a":>7} {"E c_b":>7} {"std c_a":>8} '
          f'{"spread":>7} {"err":>7} {"|c_a-.5|<.1":>11}')
    results = {}
    for large, label in ((False, 'Sigma_i = alpha I'), (True, 'Sigma_a = alpha I + mu_a mu_a^T/2')):
        for heads in (1, 2):
            c, keys, mu = simulate(large, heads, args.n, args.d, 0, 1, args.alpha, args.beta,
                                   args.samples, args.seed)
            s = stats(c)
            results[(large, heads)] = s
            print(f'{label:<34} {heads:5d} {s["mean_a"]:7.3f} {s["mean_b"]:7.3f} {s["std_a"]:8.3f} '
                  f'{s["spread"]:7.3f} {s["err"]:7.3f} {s["near_half"]:11.1%}')
            if large and heads == 2:
                # the handout says to ignore samples with q_1^T k_a < 0 (k_a flipped past zero)
                keep = (keys[:, 0] @ mu[0]) > 0
                s = stats(c[keep])
                results[(large, 'q1.ka>0')] = s
                print(f'{"  same, only q1^T k_a > 0":<34} {heads:5d} {s["mean_a"]:7.3f} {s["mean_b"]:7.3f} '
                      f'{s["std_a"]:8.3f} {s["spread"]:7.3f} {s["err"]:7.3f} {s["near_half"]:11.1%}  '
                      f'({keep.double().mean().item():.1%} of samples)')
    one, two = results[(True, 1)]['spread'], results[(True, 2)]['spread']
    print()
    print(f'large-variance key: spread of c with one head {one:.3f}, with two heads {two:.3f} '
          f'({one / two:.1f}x smaller)')
    return results


if __name__ == '__main__':
    main()
