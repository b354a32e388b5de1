"""Tests of delivery.py's fair queues (run by make python-test:
python -m unittest discover -s localstack -p '*_test.py', in the
emulator's virtualenv)."""

import time
import unittest

import delivery


def msg(i, group, inflight=False, now=None):
    now = now or time.time()
    return {
        "id": f"m{i}",
        "body": "{}",
        "group_id": group,
        "sent_at": now - 10,
        "visible_at": now + 30 if inflight else now - 1,
        "receive_count": 1 if inflight else 0,
        "first_receive_at": None,
    }


def queue(*groups):
    """A standard queue holding, per (group, visible, in flight), those
    messages."""
    now, ms, i = time.time(), [], 0
    for group, visible, inflight in groups:
        for _ in range(visible):
            ms.append(msg(i, group, now=now))
            i += 1
        for _ in range(inflight):
            ms.append(msg(i, group, inflight=True, now=now))
            i += 1
    return {"url": "http://q/items", "messages": ms, "is_fifo": False, "tags": {}, "attributes": {}}


def groups_of(ms):
    out = {}
    for m in ms:
        out[m["group_id"]] = out.get(m["group_id"], 0) + 1
    return out


class FairQueueTest(unittest.TestCase):
    def setUp(self):
        delivery.FAIR = True
        delivery._state.clear()

    def test_quiet_tenant_first(self):
        # A holds 40 of 40 in flight (≥ 30, > 10 %): noisy. B's 5 come
        # first, then A's.
        q = queue(("A", 500, 40), ("B", 5, 0))
        got = groups_of(delivery._collect_msgs(q, 10, 30))
        self.assertEqual(got, {"B": 5, "A": 5})

    def test_under_thirty_in_flight_is_not_noisy_at_first(self):
        q = queue(("A", 500, 29), ("B", 5, 0))
        delivery._collect_msgs(q, 10, 30)
        self.assertEqual(delivery._state[q["url"]].noisy, set())

    def test_most_of_the_processing_time_is_noisy(self):
        # A holds 10 in flight (under the concurrency rule's 30) for 5 s
        # while B holds none: all of the recent processing time, so A
        # is noisy and B's 5 come first.
        q = queue(("A", 500, 10), ("B", 5, 0))
        now = time.time()
        visible = [m for m in q["messages"] if m["visible_at"] <= now and m["group_id"] == "A"]
        delivery._fair(q, visible, now, 0)  # a receive that took nothing: A's 10 held
        self.assertEqual(delivery._state[q["url"]].noisy, set())
        visible = [m for m in q["messages"] if m["visible_at"] <= now]
        got = groups_of(delivery._fair(q, visible, now + 5, 10))
        self.assertEqual(delivery._state[q["url"]].noisy, {"A"})
        self.assertEqual(got, {"B": 5, "A": 5})

    def test_processing_time_decays(self):
        # A's 50 s of processing time, 5 minutes old, is e^-10 of itself:
        # under a tenth of B's 300 s since (1 in flight).
        st = delivery._Tenants()
        st.busy["A"], st.at, st.held["B"] = 50.0, 1000.0, 1
        q = queue(("A", 50, 0), ("B", 50, 1))
        delivery._state[q["url"]] = st
        for m in q["messages"]:
            m["visible_at"] = 1300.0 + (30 if m["receive_count"] else -1)
        visible = [m for m in q["messages"] if m["receive_count"] == 0]
        delivery._fair(q, visible, 1300.0, 10)
        self.assertLess(st.busy["A"], 0.01)
        self.assertAlmostEqual(st.busy["B"], 300.0)
        self.assertEqual(st.noisy, {"B"})

    def test_fewest_in_flight_first_among_the_noisy(self):
        # A 60 and C 40 in flight, both noisy, no quiet tenant: C's
        # first until it holds as many.
        q = queue(("A", 100, 60), ("C", 100, 40))
        got = groups_of(delivery._collect_msgs(q, 10, 30))
        self.assertEqual(got, {"C": 10})

    def test_messages_without_a_group_are_tenants_of_their_own(self):
        q = queue((None, 500, 40), ("B", 5, 0))
        delivery._collect_msgs(q, 10, 30)
        self.assertEqual(delivery._state[q["url"]].noisy, set())

    def test_noisy_until_its_backlog_drains(self):
        q = queue(("A", 20, 40), ("B", 50, 0))
        delivery._collect_msgs(q, 10, 30)
        st = delivery._state[q["url"]]
        self.assertEqual(st.noisy, {"A"})
        # A's messages in flight end (deleted); its backlog stays: still
        # noisy.
        q["messages"] = [m for m in q["messages"] if not (m["group_id"] == "A" and m["receive_count"] > 0)]
        delivery._collect_msgs(q, 10, 30)
        self.assertIn("A", st.noisy)
        # Its backlog drained: quiet again.
        q["messages"] = [m for m in q["messages"] if m["group_id"] != "A"]
        delivery._collect_msgs(q, 10, 30)
        self.assertNotIn("A", st.noisy)

    def test_off_shuffles_over_all(self):
        delivery.FAIR = False
        seen_a = sum(groups_of(delivery._collect_msgs(queue(("A", 500, 40), ("B", 5, 0)), 10, 30)).get("A", 0) for _ in range(5))
        self.assertGreater(seen_a, 25)  # B's 5 among 505: A's nearly every time
        self.assertEqual(delivery._state, {})


if __name__ == "__main__":
    unittest.main()
