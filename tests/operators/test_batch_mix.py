"""BatchMixOperator: mixup/cutmix values, partners from the same batch, the short last
batch, a batch of one, exact resume, and errors."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from datarax.core.errors import ConfigError, DataraxError
from datarax.core.keys import record_keys
from datarax.operators import BatchMixOperator
from datarax.testing import check_resume_exact

from operator_helpers import pipeline

import jax

N = 8


def batch(n=N, seed=0):
    rng = np.random.default_rng(seed)
    return {"image": rng.random((n, 6, 5, 3)).astype(np.float32),
            "label": np.arange(n, dtype=np.int32)}


def keys(n=N, seed=0):
    return record_keys(jax.random.key(seed), 0, jnp.arange(n))


def partner_and_lam(soft, i):
    """From record i's soft label (classes = record ids): its partner and its own weight."""
    row = np.asarray(soft[i])
    others = [c for c in np.flatnonzero(row > 1e-7) if c != i]
    assert len(others) <= 1, row
    j = others[0] if others else None
    return j, float(row[i])


def test_mixup_blends_each_record_with_one_partner_from_its_batch():
    data = batch()
    out = BatchMixOperator(mode="mixup", alpha=1.0, num_classes=N).apply_batch(data, keys())
    soft = np.asarray(out["label"])
    np.testing.assert_allclose(soft.sum(axis=1), 1.0, atol=1e-6)
    partners = []
    for i in range(N):
        j, lam = partner_and_lam(soft, i)
        assert j is not None and j != i
        partners.append(j)
        np.testing.assert_allclose(out["image"][i], lam * data["image"][i] + (1 - lam) * data["image"][j],
                                   atol=1e-6)
    assert sorted(partners) == list(range(N))  # every record is someone's partner once


def test_cutmix_pastes_a_box_of_the_partner_and_labels_by_area():
    data = batch()
    out = BatchMixOperator(mode="cutmix", alpha=1.0, num_classes=N).apply_batch(data, keys(seed=3))
    out = {k: np.asarray(v) for k, v in out.items()}
    soft = out["label"]
    for i in range(N):
        j, lam = partner_and_lam(soft, i)
        own = np.all(out["image"][i] == data["image"][i], axis=-1)
        if j is None:  # an empty box: nothing pasted
            assert own.all() and lam == pytest.approx(1.0)
            continue
        theirs = np.all(out["image"][i] == data["image"][j], axis=-1)
        assert (own | theirs).all()
        rows, cols = np.nonzero(~own)
        if rows.size:  # the pasted pixels form one rectangle
            assert (~own)[rows.min():rows.max() + 1, cols.min():cols.max() + 1].all()
        assert lam == pytest.approx(own.mean(), abs=1e-6)


@pytest.mark.parametrize("alpha", [0.2, 1.0, 3.0])
def test_lam_follows_beta_alpha_alpha(alpha):
    """The mixing weights of 2000 records: mean, variance and CDF of Beta(alpha, alpha),
    each within ~5 standard errors of what this sample size allows."""
    import jax.scipy.special as jss

    n = 2000
    data = {"image": np.zeros((n, 1), np.float32), "label": np.eye(n, dtype=np.float32)}
    out = BatchMixOperator(mode="mixup", alpha=alpha).apply_batch(data, keys(n, seed=7))
    lam = np.diagonal(np.asarray(out["label"])).astype(np.float64)  # own class: own weight
    assert ((lam >= 0) & (lam <= 1)).all()
    var = 1.0 / (4.0 * (2.0 * alpha + 1.0))  # Beta(a, a): mean 1/2, variance 1/(4(2a+1))
    mu4 = var**2 * (3.0 - 6.0 / (2.0 * alpha + 3.0))  # its 4th central moment (excess -6/(2a+3))
    assert abs(lam.mean() - 0.5) < 5 * np.sqrt(var / n)
    assert abs(lam.var() - var) < 5 * np.sqrt((mu4 - var**2) / n)
    cdf = np.asarray(jss.betainc(alpha, alpha, np.sort(lam)))  # Kolmogorov-Smirnov distance
    ks = np.max(np.maximum(np.arange(1, n + 1) / n - cdf, cdf - np.arange(n) / n))
    assert ks < 1.95 / np.sqrt(n)  # the 0.1% critical value


def test_lam_of_a_record_is_the_same_in_any_batch():
    """A record's weight is a function of its own key: batch of 8 vs its first 4."""
    op = BatchMixOperator(mode="mixup", alpha=1.0, num_classes=N)
    full = np.asarray(op.apply_batch(batch(), keys())["label"])
    part = np.asarray(op.apply_batch(batch(4), keys()[:4])["label"])
    np.testing.assert_allclose(np.diagonal(part), np.diagonal(full)[:4], rtol=1e-6)


def test_soft_labels_mix_as_given_and_a_single_record_passes_unchanged():
    data = {"image": np.ones((2, 2, 2, 1), np.float32), "label": np.eye(3, dtype=np.float32)[[0, 2]]}
    out = BatchMixOperator(mode="mixup", alpha=1.0).apply_batch(data, keys(2))
    assert out["label"].shape == (2, 3) and np.asarray(out["label"])[:, 1].max() == 0
    one = batch(1)
    out = BatchMixOperator(mode="mixup", alpha=1.0, num_classes=4).apply_batch(one, keys(1))
    np.testing.assert_array_equal(out["image"], one["image"])
    assert np.asarray(out["label"]).tolist() == [[1.0, 0.0, 0.0, 0.0]]


@pytest.mark.slow
def test_short_last_batch_mixes_only_its_own_records():
    data = {**batch(10), "id": np.arange(10, dtype=np.int32)}
    p = pipeline([BatchMixOperator(mode="mixup", alpha=1.0, num_classes=10)], data, batch_size=4)
    batches = list(p)
    assert [len(b["id"]) for b in batches] == [4, 4, 2]
    for b in batches:
        ids = set(np.asarray(b["id"]).tolist())
        for i, rid in enumerate(np.asarray(b["id"]).tolist()):
            classes = set(np.flatnonzero(np.asarray(b["label"][i]) > 1e-7).tolist())
            assert classes <= ids, f"record {rid} mixed with {classes - ids}, outside its batch {ids}"


def test_resume_is_exact():
    data = {**batch(11), "id": np.arange(11, dtype=np.int32)}
    make = lambda: pipeline([BatchMixOperator(mode="cutmix", alpha=1.0, num_classes=11)], data,
                            batch_size=4, drop_remainder=True)
    report = check_resume_exact(make, [1, 2, 2, 3], num_epochs=2)
    assert report.num_batches == 4


@pytest.mark.parametrize("kwargs,message", [
    ({"mode": "blend"}, "BatchMixOperator mode must be one of ['mixup', 'cutmix'], got 'blend'."),
    ({"alpha": 0}, "BatchMixOperator alpha must be a finite number > 0, got 0."),
    ({"alpha": float("inf")}, "BatchMixOperator alpha must be a finite number > 0, got inf."),
    ({"num_classes": 1}, "BatchMixOperator num_classes must be an int >= 2, got 1."),
])
def test_construction_errors(kwargs, message):
    with pytest.raises(ConfigError) as err:
        BatchMixOperator(**kwargs)
    assert str(err.value) == message


def test_batch_errors_name_the_field():
    with pytest.raises(DataraxError) as err:
        BatchMixOperator().apply_batch(batch(), keys())
    assert str(err.value) == (
        "BatchMixOperator 'BatchMixOperator': field 'label' holds integer labels; pass "
        "num_classes=... so they can be mixed as one-hot labels."
    )
    with pytest.raises(DataraxError) as err:
        BatchMixOperator(label_field="y", num_classes=3).apply_batch(batch(), keys())
    assert str(err.value) == (
        "BatchMixOperator 'BatchMixOperator': field(s) ['y'] not in the batch; the batch has "
        "fields ['image', 'label']. Point the operator at one of those."
    )


@pytest.mark.slow
def test_mixup_resume_is_exact_with_a_short_last_batch():
    data = {**batch(10), "id": np.arange(10, dtype=np.int32)}
    make = lambda: pipeline([BatchMixOperator(mode="mixup", alpha=0.4, num_classes=10)], data,
                            batch_size=4)
    report = check_resume_exact(make, [1, 2, 3, 3, 5], num_epochs=2)
    assert report.num_batches == 6 and report.num_records == 20


@pytest.mark.parametrize("bad", [3, -1])
def test_integer_label_outside_num_classes_is_nan_not_zero(bad):
    # a label with no one-hot row must not mix in as a silent row of zeros
    data = batch(4)
    data["label"] = np.array([0, 1, bad, 2], np.int32)
    mix = BatchMixOperator(mode="mixup", alpha=0.4, num_classes=3)
    out = mix.apply_batch(data, keys(4))
    soft = np.asarray(out["label"])
    assert np.isnan(soft[2]).all()  # the bad record's own label, and no other
    assert np.isfinite(np.delete(soft, 2, axis=0)).all()
    # its partner (the row holding its class ids' share) mixes in nothing of it
    sums = np.delete(soft, 2, axis=0).sum(axis=1)
    assert np.isclose(sums, 1.0, rtol=1e-5).sum() == 2 and (sums <= 1.0 + 1e-5).all()


def test_label_outside_num_classes_refused_by_check_finite():
    from flax import nnx

    from datarax.core.errors import SpecMismatchError
    from datarax.pipeline import Pipeline
    from datarax.sources import MemorySource, MemorySourceConfig

    data = batch(8)
    data["label"] = np.array([0, 1, 2, 1, 9, 0, 2, 1], np.int32)  # record 4 is out of range
    source = MemorySource(MemorySourceConfig(), data)
    pipe = Pipeline(source=source, stages=[BatchMixOperator(mode="cutmix", num_classes=3)],
                    batch_size=8, rngs=nnx.Rngs(0), check_finite=True)
    with pytest.raises(SpecMismatchError, match="field 'label' of the record at position 4 "
                       "of epoch 0 .*NaN or inf"):  # not its partner, which comes first
        next(iter(pipe))


@pytest.mark.parametrize("mode", ["mixup", "cutmix"])
def test_integer_labels_of_shape_batch_by_one_mix_as_class_ids(mode):
    data = batch()
    op = BatchMixOperator(mode=mode, num_classes=N)
    column = {**data, "label": data["label"][:, None]}
    out = jax.eval_shape(op.apply_batch, column, keys())  # shapes only: no compile
    assert out["label"].shape == (N, N) and out["label"].dtype == jnp.float32
    with pytest.raises(DataraxError, match=r"integer labels in 'label' must be one class id per "
                       r"record, shape \(batch,\) or \(batch, 1\), got shape \(8, 2\)"):
        jax.eval_shape(op.apply_batch, {**data, "label": np.zeros((N, 2), np.int32)}, keys())


def test_num_classes_takes_a_numpy_int_as_the_same_int():
    # num_classes=np.int64(labels.max() + 1): computed with NumPy
    data = batch()
    op = BatchMixOperator(mode="mixup", alpha=1.0, num_classes=np.int64(N))
    assert type(op.config.num_classes) is int
    expected = BatchMixOperator(mode="mixup", alpha=1.0, num_classes=N).apply_batch(data, keys())
    np.testing.assert_array_equal(op.apply_batch(data, keys())["label"], expected["label"])


def test_soft_labels_of_another_width_than_num_classes_are_refused():
    soft = dict(batch(), label=np.eye(N, dtype=np.float32))
    with pytest.raises(DataraxError, match=r"soft labels in 'label' have 8 classes but "
                                           r"num_classes=10; make them agree"):
        BatchMixOperator(num_classes=10).apply_batch(soft, keys())
    out = BatchMixOperator(num_classes=N).apply_batch(soft, keys())["label"]
    assert out.shape == (N, N)
    np.testing.assert_allclose(np.asarray(out).sum(1), 1.0, rtol=1e-6)


def test_class_ids_stored_as_floats_say_how_to_cast_them():
    floats = dict(batch(), label=np.arange(N, dtype=np.float32))
    with pytest.raises(DataraxError, match=r"got shape \(8,\)\. Class ids stored as floats: "
                                           r"cast them with MapOperator"):
        BatchMixOperator(num_classes=N).apply_batch(floats, keys())
