"""The channel symmetries (numerics/fixed_points/symmetry.py): found, not assumed, and folding is exact
where it must be."""
import dataclasses

import numpy as np
import pytest

from derivations import CHANNEL_NAMES, ModelSpec
from numerics.channel.lines import ChannelRule, channel_expectations
from numerics.channel.lines.teacher_nodes import gaussian_factor, polar_teacher_nodes
from numerics.model.bound import bind
from numerics.overlaps import Overlaps
from numerics.fixed_points.symmetry import channel_symmetries, fold_teacher_nodes

SEMANTIC = Overlaps(q=0.1148, m=0.0, V=12.67, theta=0.158)
POSITIONAL = Overlaps(q=0.0511, m=0.258, V=11.37, theta=0.0)
GENERIC = Overlaps(q=0.1, m=0.1, V=15.0, theta=0.1)
RULE = ChannelRule(n_eta=16, n_r=8, n_u=6, n_t=12)


def _symmetries(spec, ov):
    model = bind(spec)
    mu_w, B, L_hh, _, _ = gaussian_factor(model, ov)
    return channel_symmetries(model, ov, mu_w, B), L_hh


def _odd(symmetries):
    return {name for sym in symmetries for name, c in zip(CHANNEL_NAMES, sym.characters) if c < 0}


@pytest.mark.parametrize("ov, order, odd", [
    (SEMANTIC, 4, {"mhat"}),                          # flip and swap
    (POSITIONAL, 4, {"thetahat_y", "thetahat_dl"}),   # teacher sign and swap-with-flip
    (GENERIC, 2, set()),                              # swap-with-flip only
])
def test_default_model_symmetry_groups(ov, order, odd):
    symmetries, _ = _symmetries(ModelSpec(), ov)
    assert len(symmetries) == order
    assert sum(s.is_identity for s in symmetries) == 1
    assert _odd(symmetries) == odd


def test_non_commuting_A_loses_the_swap():
    """The paper's second teacher matrix (docs/theory.md, section 1.2), A = [[0.3, 0.7], [0.8, 0.2]],
    does not commute with the token swap."""
    symmetries, _ = _symmetries(ModelSpec(A=((0.3, 0.7), (0.8, 0.2))), POSITIONAL)
    assert len(symmetries) == 2  # identity and the teacher sign
    assert all(np.array_equal(np.abs(s.G_w), np.eye(2)) for s in symmetries)
    assert _odd(symmetries) == {"thetahat_y", "thetahat_dl"}


def test_folded_teacher_rule_integrates_invariant_functions_exactly():
    spec = ModelSpec()
    model = bind(spec)
    symmetries, L_hh = _symmetries(spec, SEMANTIC)
    e1, e2, w = polar_teacher_nodes(model, SEMANTIC.V, L_hh, RULE)
    f1, f2, fw, used = fold_teacher_nodes(e1, e2, w, L_hh, symmetries)
    assert len(used) == 4 and f1.size * 4 == e1.size  # n_eta = 16: no node on a symmetry axis

    def invariant(a, b):  # under eta -> -eta and the swap
        return np.cos(a * b) + a**2 * b**2 + np.exp(-(a**2 + b**2))

    assert fw.sum() == pytest.approx(w.sum(), rel=1e-14)
    assert np.dot(fw, invariant(f1, f2)) == pytest.approx(np.dot(w, invariant(e1, e2)), rel=1e-13)
    # a function that is not invariant is not integrated correctly: the check can fail
    assert abs(np.dot(fw, f1 * np.abs(f1)) - np.dot(w, e1 * np.abs(e1))) > 1e-3


@pytest.mark.parametrize("ov", [SEMANTIC, POSITIONAL])
def test_folded_channel_agrees_with_unfolded(ov):
    """The folded rule is a different discretisation of the same integral: it must agree
    with the unfolded one to within the unfolded rule's own refinement difference."""
    model = bind(ModelSpec())
    fine = dataclasses.replace(RULE, use_symmetry=False)
    coarse = ChannelRule(n_eta=12, n_r=6, n_u=4, n_t=10, use_symmetry=False)
    full = channel_expectations(model, ov, fine).expectations
    estimate = channel_expectations(model, ov, coarse).expectations
    folded = channel_expectations(model, ov, RULE)
    assert folded.symmetry_order > 3
    for name in CHANNEL_NAMES:
        bar = abs(full[name] - estimate[name])
        assert abs(folded.expectations[name] - full[name]) <= max(bar, 1e-14), name


def _folded_by_definition(e1, e2, weight, L_hh, symmetries):
    """The folding written from its definition: each node's image under a symmetry is the node
    within 1e-10 of it (every pair compared); a symmetry with an image that is no node is not used."""
    nodes = np.stack([e1, e2], axis=1)
    tol = 1e-10 * max(np.max(np.abs(nodes)), 1.0)
    images = []
    for sym in symmetries:
        moved = nodes @ (np.linalg.inv(L_hh) @ sym.G_h @ L_hh).T
        distance = np.sqrt(((moved[:, None, :] - nodes[None, :, :]) ** 2).sum(axis=-1))
        if np.all(distance.min(axis=1) <= tol):
            images.append(distance.argmin(axis=1))
    if not images:
        return e1, e2, weight
    representative = np.min(np.stack(images), axis=0)
    keep = np.unique(representative)
    folded = np.zeros(nodes.shape[0])
    np.add.at(folded, representative, weight)
    return e1[keep], e2[keep], folded[keep]


@pytest.mark.parametrize("ov", [SEMANTIC, POSITIONAL, GENERIC])
@pytest.mark.parametrize("rule", [RULE, ChannelRule(n_eta=15, n_r=8, n_u=6, n_t=12)])
def test_folding_matches_every_node_by_its_definition(ov, rule):
    """The node matching (sorted projections) gives the exhaustive comparison's orbits exactly,
    with an odd rule (nodes on the symmetry axes) and with images moved off the nodes."""
    spec = ModelSpec()
    model = bind(spec)
    symmetries, L_hh = _symmetries(spec, ov)
    e1, e2, w = polar_teacher_nodes(model, ov.V, L_hh, rule)
    for got, want in zip(fold_teacher_nodes(e1, e2, w, L_hh, symmetries)[:3],
                         _folded_by_definition(e1, e2, w, L_hh, symmetries)):
        np.testing.assert_array_equal(got, want)
    # one node moved by 1e-6 of the scale: no symmetry maps the set onto itself any more
    moved = e1.copy()
    moved[3] += 1e-6 * max(np.max(np.abs(e1)), 1.0)
    f1, f2, fw, used = fold_teacher_nodes(moved, e2, w, L_hh, symmetries)
    assert len(used) == sum(np.allclose(s.G_h, np.eye(2)) for s in symmetries)
    if not used:
        np.testing.assert_array_equal(f1, moved)
