"""ranking.forked.fork_map: the pieces' results in the items' order whatever the processes, this process one of
the workers, a child's exception raised here, a child that dies leaving its piece to this process."""

from __future__ import annotations

import os
import time

import pytest
from biasboard.ranking import forked


def _square_with_pid(x: int) -> tuple[int, int]:
    return x * x, os.getpid()


@pytest.mark.parametrize("workers", [1, 2, 5])
def test_results_come_back_in_the_items_order(workers):
    got = forked.fork_map(_square_with_pid, list(range(17)), workers)
    assert [value for value, _ in got] == [x * x for x in range(17)]
    pids = {pid for _, pid in got}
    if workers == 1:
        assert pids == {os.getpid()}
    else:
        assert len(pids) <= min(workers, 17)


def test_this_process_is_one_of_the_workers():
    """With two workers one child is forked and this process takes pieces too (slow pieces: both get some)."""

    def slow(x: int) -> int:
        time.sleep(0.05)
        return os.getpid()

    pids = forked.fork_map(slow, list(range(12)), 2)
    assert os.getpid() in pids and len(set(pids)) == 2


def _in_child(action):
    """A piece that runs ``action`` in a forked child and takes 0.2 s here (so a child surely gets a piece)."""
    parent = os.getpid()

    def piece(x: int) -> int:
        if os.getpid() != parent:
            action(x)
        time.sleep(0.2)
        return x + 1

    return piece


def test_a_childs_exception_is_raised_here():
    def fail(x: int) -> None:
        raise ValueError(f"piece {x} failed")

    with pytest.raises(ValueError, match="failed"):
        forked.fork_map(_in_child(fail), list(range(4)), 2)


def test_an_exception_that_does_not_pickle_is_raised_as_text():
    class Local(Exception):  # a local class: pickling it fails
        pass

    def fail(x: int) -> None:
        raise Local("no pickle")

    with pytest.raises(forked.ChildFailed, match="no pickle"):
        forked.fork_map(_in_child(fail), list(range(4)), 2)


def test_a_child_that_dies_leaves_its_piece_to_this_process():
    assert forked.fork_map(_in_child(lambda x: os._exit(3)), list(range(4)), 3) == [1, 2, 3, 4]
