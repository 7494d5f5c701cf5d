"""The offset window of a Kafka partition (conveyor.broker.kafka.offsets): what may be committed
while messages finish out of order."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from conveyor.broker.kafka.offsets import OffsetWindow


def test_the_commit_point_is_the_oldest_unfinished_offset() -> None:
    window = OffsetWindow()
    assert window.commit_point() is None and window.due() is None and window.span() == 0
    for offset in range(10, 15):
        window.take(offset)
    assert window.commit_point() == 10 and window.span() == 5 and window.open == 5
    assert window.done(11) and window.done(12)
    assert window.commit_point() == 10  # 10 still runs: 11 and 12 are not committed
    assert window.done(10)
    assert window.commit_point() == 13 and window.span() == 2
    assert not window.done(10)  # twice, or never handed out: nothing changes
    window.done(13)
    window.done(14)
    assert window.commit_point() == 15 and window.span() == 0 and window.open == 0


def test_due_reports_a_commit_point_once_and_only_forward() -> None:
    window = OffsetWindow()
    window.take(0)
    window.take(1)
    assert window.due() == 0
    window.committed = 0
    assert window.due() is None
    window.done(1)
    assert window.due() is None  # 0 still open
    window.done(0)
    assert window.due() == 2


@given(st.permutations(list(range(30))), st.integers(0, 30))
def test_never_commits_past_an_unfinished_offset(order: list[int], finished: int) -> None:
    window = OffsetWindow()
    for offset in range(30):
        window.take(offset)
    for offset in order[:finished]:
        window.done(offset)
    unfinished = set(order[finished:])
    point = window.commit_point()
    assert point == (min(unfinished) if unfinished else 30)
    assert all(offset >= point for offset in unfinished)


def test_a_revoked_partition_no_longer_reports_its_read_position() -> None:
    """Read positions size the relay's backlog. A consumer that kept reporting the position of
    a partition taken from it overwrote the new owner's, which had read further: the relay saw
    those messages as waiting, and stopped publishing when nothing more came (scenario 30)."""
    from conveyor.broker.kafka.windows import Windows

    windows = Windows()
    windows.take(("t", 0), 40)
    windows.take(("t", 1), 7)
    assert {(tp.partition, tp.offset) for tp in windows.read_positions()} == {(0, 41), (1, 8)}
    windows.revoke([("t", 0)])
    windows.take(("t", 1), 8)
    assert {(tp.partition, tp.offset) for tp in windows.read_positions()} == {(1, 9)}
    assert windows.read_positions() == []  # nothing moved since
