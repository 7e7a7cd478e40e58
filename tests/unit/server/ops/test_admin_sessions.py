"""The Admin session table (``server.ops.admin_access.AdminSessions``): bounded overall and per
user, expiring on its clock, ended by a new security generation, one session per credentials,
and the credentials kept only when a websocket protocol trusts Admin sessions."""

from __future__ import annotations

from amps_emulator.server.ops.admin_access import AdminSessions


class FakeSession:
    def __init__(self, user: str) -> None:
        self.user_id = user
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def table(keep: bool = False, **kw) -> tuple[AdminSessions, Clock]:
    clock = Clock()
    return AdminSessions(clock, 60.0, keep, **kw), clock


def test_a_token_names_its_session_until_max_age_on_the_clock():
    t, clock = table()
    s = FakeSession("u")
    token = t.issue(s, ("u", "pw"), 0)
    assert len(token) == 43 and s.closed == 1  # (its cached document released at once)
    clock.now = 59.9
    assert t.find(token, 0) is not None and t.find(token, 0).session is s
    clock.now = 60.0
    assert t.find(token, 0) is None and len(t) == 0
    assert t.find("x" * 43, 0) is None


def test_a_new_generation_ends_every_session():
    t, _ = table()
    token = t.issue(FakeSession("u"), ("u", "pw"), 3)
    assert t.find(token, 4) is None and len(t) == 0


def test_the_same_credentials_get_the_same_session_and_others_a_new_one():
    t, clock = table()
    first = t.issue(FakeSession("u"), ("u", "pw"), 0)
    again = FakeSession("u")
    assert t.issue(again, ("u", "pw"), 0) == first
    assert t.find(first, 0).session is again  # the latest log-on's permissions
    assert t.issue(FakeSession("u"), ("u", "other"), 0) != first
    clock.now = 61
    assert t.issue(FakeSession("u"), ("u", "pw"), 0) != first


def test_sessions_are_bounded_per_user_and_overall_the_oldest_going_first():
    t, _ = table(limit=5, per_user=2)
    a = [t.issue(FakeSession("a"), ("a", str(i)), 0) for i in range(3)]
    assert t.find(a[0], 0) is None and t.find(a[1], 0) and t.find(a[2], 0) and len(t) == 2
    others = [t.issue(FakeSession(f"u{i}"), (f"u{i}", "pw"), 0) for i in range(4)]
    assert len(t) == 5 and t.find(a[1], 0) is None  # the oldest overall went
    assert all(t.find(x, 0) for x in others)
    assert t.clear() == 5 and len(t) == 0


def test_credentials_are_kept_only_for_trusted_admin():
    kept, _ = table(keep=True)
    token = kept.issue(FakeSession("u"), ("u", "pw"), 0)
    assert kept.credentials(token, 0) == ("u", "pw")
    assert kept.credentials(token, 1) is None  # (a new generation: gone)
    plain, _ = table(keep=False)
    token = plain.issue(FakeSession("u"), ("u", "pw"), 0)
    assert plain.find(token, 0) is not None and plain.credentials(token, 0) is None
