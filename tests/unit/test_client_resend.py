"""tritonpipeline.client resends a stateless request once when the server closed its pooled connection
(what a client sees when a pod leaves during a rollout), and never a request of a sequence (the rule is a
pure function: a restarted server cannot tell a resent sequence request from a lost one).

Real tritonserver: a first server answers (the client keeps the connection), is stopped, and a second one
starts on the same port; the client's next request goes out on the connection the first server closed.
Here the pure tests; those on real components are in tests/component/test_client_resend.py."""

from __future__ import annotations


def test_only_requests_outside_a_sequence_may_be_resent() -> None:
    from tritonpipeline.client import no_sequence

    assert all(no_sequence(s) for s in (0, "", None))
    assert not any(no_sequence(s) for s in (7, "session-7"))
