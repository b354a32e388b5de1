"""Tests of esmscaling.py's ramp (run by make python-test:
python -m unittest discover -s localstack -p '*_test.py', in the
emulator's virtualenv)."""

import unittest

import esmscaling as es


class RampTest(unittest.TestCase):
    def setUp(self):
        es._ramps.clear()
        es.LOG = False

    def test_starts_at_five_and_adds_five_a_second(self):
        # "starts processing five batches at a time", then "up to 300 more
        # instances per minute" while messages are available.
        self.assertEqual(es.allowance("m", 100, True, 0.0), 5)
        self.assertEqual(es.allowance("m", 100, True, 1.0), 10)
        self.assertEqual(es.allowance("m", 100, True, 10.0), 55)
        self.assertEqual(es.allowance("m", 100, True, 60.0), 100, "MaximumConcurrency bounds it")
        self.assertEqual(es.allowance("m", 100, True, 600.0), 100)

    def test_falls_back_when_traffic_is_low(self):
        es.allowance("m", 100, True, 0.0)
        self.assertEqual(es.allowance("m", 100, True, 4.0), 25)
        # A queue without a visible message for less than LOW_SECONDS keeps
        # its allowance (a message in flight, a retry's delay) ...
        self.assertEqual(es.allowance("m", 100, False, 5.0), 25)
        self.assertEqual(es.allowance("m", 100, True, 5.0 + es.LOW_SECONDS - 1), 25)
        self.assertEqual(es.allowance("m", 100, True, 5.0 + es.LOW_SECONDS), 30)
        # ... and falls back to five once it has had none for LOW_SECONDS.
        self.assertEqual(es.allowance("m", 100, False, 20.0), 30)
        self.assertEqual(es.allowance("m", 100, False, 20.0 + es.LOW_SECONDS), 5)
        self.assertEqual(es.allowance("m", 100, True, 31.0), 5)
        self.assertEqual(es.allowance("m", 100, True, 32.0), 10)
        # Seen idle, then busy again after LOW_SECONDS unseen: five again.
        es.allowance("m", 100, False, 40.0)
        self.assertEqual(es.allowance("m", 100, True, 40.0 + es.LOW_SECONDS), 5)

    def test_a_smaller_limit_wins(self):
        self.assertEqual(es.allowance("fifo-like", 1, True, 0.0), 1)
        self.assertEqual(es.allowance("two", 2, True, 0.0), 2)
        self.assertEqual(es.allowance("two", 2, True, 100.0), 2)

    def test_mappings_ramp_apart(self):
        es.allowance("a", 100, True, 0.0)
        self.assertEqual(es.allowance("a", 100, True, 2.0), 15)
        self.assertEqual(es.allowance("b", 100, True, 2.0), 5)


class ProvisionedTest(unittest.TestCase):
    def setUp(self):
        es._ramps.clear()
        es.LOG = False

    def test_starts_with_the_ready_pollers_and_adds_a_thousand_a_minute(self):
        # 3 pollers of 10 invocations ready; "up to 1,000 concurrency per
        # minute"; at most 15 pollers × 10.
        start, grow = 3 * es.POLLER_INVOCATIONS, es.PROVISIONED_PER_MINUTE
        self.assertEqual(es.allowance("p", 150, True, 0.0, start, grow), 30)
        self.assertEqual(es.allowance("p", 150, True, 3.0, start, grow), 80)
        self.assertEqual(es.allowance("p", 150, True, 60.0, start, grow), 150)
        # Low traffic: back to the ready pollers, not to five.
        es.allowance("p", 150, False, 61.0, start, grow)
        self.assertEqual(es.allowance("p", 150, False, 61.0 + es.LOW_SECONDS, start, grow), 30)

    def test_mapping_limit_is_its_pollers(self):
        esm = {"UUID": "pm", "ProvisionedPollerConfig": {"MinimumPollers": 2, "MaximumPollers": 4}}
        queue = {"messages": [{"visible_at": 0}]}
        self.assertEqual(es._sqs_esm_concurrency(esm, {}, {}, queue), 20)
        es.ON = False
        try:
            self.assertEqual(es._sqs_esm_concurrency(esm, {}, {}, queue), 40)
            self.assertEqual(es._sqs_esm_concurrency(esm, {"concurrency": 25}, {}, queue), 25, "reserved concurrency bounds it")
        finally:
            es.ON = True

    def test_lambda_refuses_what_it_refuses(self):
        self.assertIsNone(es.check_pollers({"ScalingConfig": {"MaximumConcurrency": 100}}))
        self.assertEqual(es.check_pollers({"ProvisionedPollerConfig": {"MinimumPollers": "3", "MaximumPollers": "15"}}),
                         {"MinimumPollers": 3, "MaximumPollers": 15})
        for bad in ({"ProvisionedPollerConfig": {"MinimumPollers": 3, "MaximumPollers": 15}, "ScalingConfig": {"MaximumConcurrency": 2}},
                    {"ProvisionedPollerConfig": {"MinimumPollers": 1, "MaximumPollers": 15}},
                    {"ProvisionedPollerConfig": {"MinimumPollers": 201, "MaximumPollers": 300}},
                    {"ProvisionedPollerConfig": {"MinimumPollers": 20, "MaximumPollers": 10}},
                    {"ProvisionedPollerConfig": {"MinimumPollers": 2, "MaximumPollers": 2001}}):
            with self.assertRaises(ValueError, msg=str(bad)):
                es.check_pollers(bad)


if __name__ == "__main__":
    unittest.main()
