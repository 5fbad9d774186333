from __future__ import annotations

import pytest

from betcode.sessions.input_lock import InputLock, NoInputLock, NotAttached


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def lock(clock: FakeClock) -> InputLock:
    return InputLock(transfer_timeout=10, idle_transfer=300, clock=clock)


def test_first_attached_client_holds_the_lock(lock: InputLock) -> None:
    assert lock.attach("a") is True
    assert lock.attach("b") is False
    assert lock.holder == "a"


def test_non_holder_input_is_refused_with_holder_named(lock: InputLock) -> None:
    lock.attach("a")
    lock.attach("b")
    with pytest.raises(NoInputLock, match="holder: a"):
        lock.check_input("b")
    lock.check_input("a")


def test_lock_passes_to_waiter_when_holder_detaches(lock: InputLock) -> None:
    for client in ("a", "b", "c"):
        lock.attach(client)
    with pytest.raises(NoInputLock):
        lock.check_input("c")  # c now waits for the lock
    assert lock.detach("a") is True
    assert lock.holder == "c"


def test_lock_passes_to_longest_attached_without_waiters(lock: InputLock) -> None:
    for client in ("a", "b", "c"):
        lock.attach(client)
    lock.detach("a")
    assert lock.holder == "b"


def test_last_client_leaving_frees_the_lock(lock: InputLock) -> None:
    lock.attach("a")
    lock.detach("a")
    assert lock.holder is None
    assert lock.attach("z") is True


def test_request_silence_transfers_after_timeout(lock: InputLock, clock: FakeClock) -> None:
    lock.attach("a")
    lock.attach("b")
    transfer = lock.request("b")
    assert transfer is not None
    assert transfer.deadline == clock.now + 10
    clock.now = transfer.deadline
    assert lock.resolve(transfer) is True
    assert lock.holder == "b"


def test_request_refused_when_holder_sends_input(lock: InputLock, clock: FakeClock) -> None:
    lock.attach("a")
    lock.attach("b")
    transfer = lock.request("b")
    assert transfer is not None
    clock.now += 3
    lock.check_input("a")
    clock.now = transfer.deadline
    assert lock.resolve(transfer) is False
    assert lock.holder == "a"


def test_the_holder_asking_for_its_lock_is_granted_at_once(lock: InputLock) -> None:
    lock.attach("solo")
    assert lock.request("solo") is None
    assert lock.holder == "solo"


@pytest.mark.parametrize("attached", [[], ["a"]], ids=["free lock", "held lock"])
def test_a_client_that_never_attached_can_neither_request_nor_wait(
    lock: InputLock, attached: list[str]
) -> None:
    for client in attached:
        lock.attach(client)
    with pytest.raises(NotAttached, match="attach to the session with Converse") as refused:
        lock.request("stranger")
    assert isinstance(refused.value, NoInputLock)  # the same wire refusal as other input
    with pytest.raises(NotAttached):
        lock.check_input("stranger")
    assert (lock.holder, lock.attached, lock.waiters) == (
        attached[0] if attached else None,
        attached,
        [],
    )


def test_a_requester_gone_at_the_deadline_leaves_the_lock_with_the_holder(
    lock: InputLock, clock: FakeClock
) -> None:
    lock.attach("a")
    lock.attach("b")
    transfer = lock.request("b")
    assert transfer is not None
    lock.detach("b")  # its stream closed; its request still waits
    clock.now = transfer.deadline
    assert lock.resolve(transfer) is False
    assert lock.holder == "a"


def test_a_requester_back_by_the_deadline_gets_the_lock(lock: InputLock, clock: FakeClock) -> None:
    lock.attach("a")
    lock.attach("b")
    transfer = lock.request("b")
    assert transfer is not None
    lock.detach("b")  # a dropped stream, healed before the holder's time is up
    lock.attach("b")
    clock.now = transfer.deadline
    assert lock.resolve(transfer) is True
    assert lock.holder == "b"


def test_a_withdrawn_request_stops_waiting(lock: InputLock, clock: FakeClock) -> None:
    lock.attach("a")
    lock.attach("b")
    assert lock.request("b") is not None
    assert lock.waiters == ["b"]
    lock.withdraw("b")
    assert lock.waiters == []
    clock.now += 301
    assert lock.idle_handover() is False
    assert lock.holder == "a"


def test_a_client_stays_attached_while_one_of_its_streams_is(lock: InputLock) -> None:
    lock.attach("a")
    lock.attach("a")  # a second stream of the same client (a reconnect racing the old one)
    lock.attach("b")
    assert lock.detach("a") is False
    assert lock.holder == "a"
    lock.check_input("a")
    assert lock.detach("a") is True
    assert (lock.holder, lock.attached) == ("b", ["b"])


def test_idle_holder_hands_over_only_when_someone_waits(lock: InputLock, clock: FakeClock) -> None:
    lock.attach("a")
    lock.attach("b")
    clock.now += 301
    assert lock.idle_handover() is False  # nobody waits
    with pytest.raises(NoInputLock):
        lock.check_input("b")
    assert lock.idle_handover() is True
    assert lock.holder == "b"


def test_active_holder_keeps_lock_despite_waiters(lock: InputLock, clock: FakeClock) -> None:
    lock.attach("a")
    lock.attach("b")
    with pytest.raises(NoInputLock):
        lock.check_input("b")
    clock.now += 200
    lock.check_input("a")
    clock.now += 200
    assert lock.idle_handover() is False


async def test_every_change_of_holder_is_reported_once(lock: InputLock, clock: FakeClock) -> None:
    moves: list[str | None] = []
    lock.attach("a")  # before watch: not reported
    lock.watch(moves.append)
    lock.attach("b")
    lock.attach("c")
    assert lock.request("a") is None  # the holder asking again: no move
    transfer = lock.request("c")
    assert transfer is not None
    clock.now = transfer.deadline
    assert lock.resolve(transfer)
    lock.detach("c")  # to the longest attached
    lock.detach("a")
    lock.detach("b")
    lock.close()
    assert moves == ["c", "a", "b", None]


def test_a_viewer_takes_the_lock_only_with_its_first_input(lock: InputLock) -> None:
    assert lock.attach("page", viewer=True) is False
    assert lock.holder is None
    lock.check_attached("page")
    lock.check_input("page")  # the first input takes the free lock
    assert lock.holder == "page"


def test_a_viewer_never_gets_the_lock_by_succession(lock: InputLock) -> None:
    lock.attach("page", viewer=True)
    assert lock.attach("terminal") is True
    lock.detach("terminal")
    assert lock.holder is None
    assert lock.attach("other") is True  # the next writer gets it, not the page


def test_a_viewer_that_held_the_lock_is_a_writer_from_then_on(
    lock: InputLock, clock: FakeClock
) -> None:
    lock.attach("page", viewer=True)
    assert lock.request("page") is None
    lock.attach("terminal")
    transfer = lock.request("terminal")
    assert transfer is not None
    clock.now = transfer.deadline
    assert lock.resolve(transfer) is True
    lock.detach("terminal")
    assert lock.holder == "page"


def test_check_attached_refuses_a_client_without_a_stream(lock: InputLock) -> None:
    with pytest.raises(NotAttached):
        lock.check_attached("stranger")
