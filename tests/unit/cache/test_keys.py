import numpy as np

from router.cache._private import keys
from router.cache._private.keys import cache_key, input_digest


def d(inputs, model="m", version="1"):
    return input_digest(model, version, inputs)


def test_same_values_same_key():
    assert d({"x": np.array([1, 2])}) == d({"x": np.array([1, 2])})


def test_int_and_float_differ():
    assert d({"x": np.array([1, 2], dtype=np.int64)}) != d(
        {"x": np.array([1, 2], dtype=np.float64)}
    )
    assert d({"x": np.array([1, 2], dtype=np.int32)}) != d({"x": np.array([1, 2], dtype=np.int64)})


def test_shape_is_part_of_the_key():
    assert d({"x": np.array([1, 2, 3, 4])}) != d({"x": np.array([[1, 2], [3, 4]])})


def test_version_and_model_are_part_of_the_key():
    x = {"x": np.array([1.0])}
    assert d(x, version="1") != d(x, version="2")
    assert d(x, model="a") != d(x, model="b")


def test_input_names_sorted_and_bound_to_values():
    a, b = np.array([1]), np.array([2])
    assert d({"a": a, "b": b}) == d({"b": b, "a": a})
    assert d({"a": a, "b": b}) != d({"a": b, "b": a})


def test_layout_and_byte_order_do_not_matter():
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    fortran = np.asfortranarray(base)
    big = base.astype(">f4")
    strided = np.arange(24, dtype=np.float32).reshape(3, 8)[:, ::2]
    assert d({"x": base}) == d({"x": fortran}) == d({"x": big})
    assert d({"x": strided}) == d({"x": np.ascontiguousarray(strided)})


def test_no_ambiguity_between_names_and_values():
    assert d({"ab": np.array([1], dtype=np.uint8)}) != d({"a": np.array([1], dtype=np.uint8)})
    assert d({"x": np.zeros(0)}) != d({"x": np.zeros((0, 1))})


def test_full_key_is_readable():
    key = cache_key("ts:rc:", "digits", "3", {"x": np.array([1])})
    assert key.startswith("ts:rc:digits@3:") and len(key.split(":")[-1]) == 64


def _frozen(arr: np.ndarray) -> np.ndarray:
    arr = arr.copy()
    arr.flags.writeable = False
    return arr


def test_inputs_that_cannot_change_are_remembered_and_read_the_same():
    x = _frozen(np.arange(8, dtype=np.float32))
    first = d({"x": x})
    assert first == d({"x": np.arange(8, dtype=np.float32)})  # the same as hashing afresh
    assert any(arrays[0] is x for arrays, _ in keys._IMMUTABLE_DIGESTS.values())
    assert d({"x": x}) == first
    assert d({"x": x}, model="other") != first  # model and version stay in the memo's key


def test_inputs_that_can_change_are_hashed_every_time():
    writable = np.arange(4, dtype=np.float32)
    before = d({"x": writable})
    writable[0] = 9.0
    assert d({"x": writable}) != before
    base = np.arange(4, dtype=np.float32)
    view = base[:]  # read-only view of a writable base: changes through the base
    view.flags.writeable = False
    before = d({"x": view})
    base[0] = 9.0
    assert d({"x": view}) != before
    remembered = [a for arrays, _ in keys._IMMUTABLE_DIGESTS.values() for a in arrays]
    assert not any(a is writable or a is view for a in remembered)


def test_the_memo_is_bounded(monkeypatch):
    monkeypatch.setattr(keys, "IMMUTABLE_DIGESTS_MAX", 3)
    monkeypatch.setattr(keys, "_IMMUTABLE_DIGESTS", {})
    arrays = [_frozen(np.array([i])) for i in range(5)]
    for a in arrays:
        d({"x": a})
    assert len(keys._IMMUTABLE_DIGESTS) == 3
    held = [a for arrs, _ in keys._IMMUTABLE_DIGESTS.values() for a in arrs]
    assert all(any(h is a for h in held) for a in arrays[2:])  # oldest out first
    big = _frozen(np.zeros(keys.IMMUTABLE_MAX_BYTES // 8 + 1))
    d({"x": big})
    assert not any(a is big for arrs, _ in keys._IMMUTABLE_DIGESTS.values() for a in arrs)
