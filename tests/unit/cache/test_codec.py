import numpy as np
import pytest

from router.cache import CachedAnswer
from router.cache._private import codec


def test_round_trip_keeps_dtype_shape_values_and_labels():
    ans = CachedAnswer(
        outputs={
            "logits": np.arange(6, dtype=np.float16).reshape(2, 3),
            "ids": np.array([[1, -2]], dtype=np.int64),
            "ok": np.array([True, False]),
            "big": np.arange(3, dtype=">i4"),
            "empty": np.zeros((0, 4), dtype=np.float32),
        },
        served_by="gpu:m@2",
        version="2",
    )
    out, created = codec.decode(codec.encode(ans, created_at=12.5))
    assert created == 12.5 and out.served_by == "gpu:m@2" and out.version == "2"
    assert list(out.outputs) == list(ans.outputs)
    for name, arr in ans.outputs.items():
        got = out.outputs[name]
        assert got.shape == arr.shape and got.dtype.kind == arr.dtype.kind
        np.testing.assert_array_equal(got, arr)
        assert not got.flags.writeable


def test_object_dtype_is_refused():
    ans = CachedAnswer(outputs={"x": np.array(["a"], dtype=object)}, served_by="s")
    with pytest.raises(codec.CodecError, match="outputs.x"):
        codec.encode(ans, created_at=0)


@pytest.mark.parametrize("mutate", ["magic", "truncate", "trailing", "header"])
def test_corrupt_payloads_raise_codec_error(mutate):
    good = codec.encode(
        CachedAnswer(outputs={"x": np.arange(4, dtype=np.float32)}, served_by="s"), created_at=0
    )
    bad = {
        "magic": b"XXXX" + good[4:],
        "truncate": good[:-3],
        "trailing": good + b"\0",
        "header": good[:9] + b"[" + good[10:],
    }[mutate]
    with pytest.raises(codec.CodecError):
        codec.decode(bad)


def test_dtype_smuggling_in_header_is_refused():
    payload = codec.encode(CachedAnswer(outputs={"x": np.arange(2)}, served_by="s"), created_at=0)
    forged = payload.replace(b'"<i8"', b'"|O8"')
    with pytest.raises(codec.CodecError):
        codec.decode(forged)
