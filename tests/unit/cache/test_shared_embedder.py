"""SharedEmbedder: one embedding per text across its users, bounded."""

import numpy as np

from router.cache import SharedEmbedder
from tests.support.cache import BagOfWordsEmbedder


def test_each_text_is_embedded_once_and_the_memo_is_bounded():
    inner = BagOfWordsEmbedder()
    shared = SharedEmbedder(inner, max_texts=2)
    a = shared.embed(["reset my password"])
    b = shared.embed(["reset my password", "cancel my order", "reset my password"])
    assert shared.computed == 2  # the repeat and the earlier text came from the memo
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(b[0], b[2])
    np.testing.assert_array_equal(b, inner.embed(["reset my password", "cancel my order",
                                                  "reset my password"]))
    shared.embed(["third text"])  # bound 2: the least recently used ("cancel ...") is dropped
    shared.embed(["reset my password"])
    assert shared.computed == 3  # "reset ..." was read last: still there
    shared.embed(["cancel my order"])
    assert shared.computed == 4
    assert shared.name == inner.name and shared.dimension == inner.dimension
