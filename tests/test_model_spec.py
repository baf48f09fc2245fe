"""The model specification: defaults, shapes, the one CSV schema, and one-line errors."""
import numpy as np
import pytest

from derivations.spec import DEFAULT_A, ModelSpec, ModelSpecError, default_A, default_positions, parse_A


def test_defaults_are_the_papers_model():
    spec = ModelSpec()
    assert spec.shape == (2, 1, 1, 1)
    assert spec.A == DEFAULT_A and spec.positions == ((1.0,), (-1.0,))
    assert spec.is_two_token_rank_one


def test_defaults_for_more_tokens():
    spec = ModelSpec(tokens=3, rank=2)
    assert spec.positions == default_positions(3) == tuple(tuple(np.eye(3)[i]) for i in range(3))
    A = np.array(spec.A)
    assert np.allclose(np.diag(A), 0.6) and np.allclose(A.sum(axis=1), 1.0)
    assert default_A(2) == DEFAULT_A
    assert spec.shape == (3, 2, 1, 3) and not spec.is_two_token_rank_one


@pytest.mark.parametrize("spec", [ModelSpec(), ModelSpec(tokens=3, rank=2, teacher_rank=2, omega=0.1),
                                  ModelSpec(tokens=12, positions=np.ones((12, 1)).tolist())])
def test_columns_read_back_to_the_same_model(spec):
    row = {k: str(v) for k, v in spec.to_columns().items()}
    assert ModelSpec.from_columns(row) == spec


@pytest.mark.parametrize("changes, parameter", [
    (dict(tokens=1), "tokens"), (dict(rank=0), "rank"), (dict(teacher_rank=1.5), "teacher_rank"),
    (dict(tokens=True), "tokens"), (dict(tokens=3, A=DEFAULT_A), "A"), (dict(positions=((1.0,),)), "positions"),
    (dict(positions=((1, 0, 0), (0, 1, 0))), "positions"), (dict(A=((0.5, 0.6), (0.5, 0.5))), "A"),
    (dict(A=((np.nan, 1.0), (0.5, 0.5))), "A"), (dict(positions=((np.inf,), (1.0,))), "positions"),
])
def test_bad_shapes_and_values_name_the_parameter(changes, parameter):
    with pytest.raises(ModelSpecError) as info:
        ModelSpec(**changes)
    assert info.value.parameter == parameter and "\n" not in str(info.value)


def test_parse_A_accepts_rows_and_the_flat_form():
    assert parse_A("0.6,0.4,0.4,0.6") == DEFAULT_A
    assert parse_A("0.6,0.4;0.4,0.6") == DEFAULT_A
    assert parse_A("0.3,0.7;0.8,0.2") == ((0.3, 0.7), (0.8, 0.2))
    assert len(parse_A("1,0,0;0,1,0;0,0,1")) == 3
    for bad in ("0.6,0.4,0.4", "a,b;c,d", "0.6,0.4;0.4"):
        with pytest.raises(ModelSpecError):
            parse_A(bad)


def test_features_of_the_two_token_rank_one_model_refuse_other_shapes():
    with pytest.raises(ModelSpecError, match="rank"):
        ModelSpec(rank=2).require_two_token_rank_one("the line quadrature")
    ModelSpec().require_two_token_rank_one("the line quadrature")
