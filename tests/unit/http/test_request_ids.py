"""Request ids: a per-process random prefix and a counter (router.schemas.new_request_id)."""

from __future__ import annotations


def test_request_ids_are_unique_in_a_process_and_across_a_fork() -> None:
    import os

    from router.schemas import new_request_id

    ids = {new_request_id() for _ in range(10_000)}
    assert len(ids) == 10_000 and all(len(i) == 32 for i in ids)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its ids must not repeat the parent's next ones
        os.write(w, new_request_id().encode())
        os._exit(0)
    os.waitpid(pid, 0)
    child = os.read(r, 64).decode()
    assert child not in ids and child[:16] != new_request_id()[:16]
