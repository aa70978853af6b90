"""What the unit and the component module of one name share (support/x.py for test_x.py in both), and
the tiers' rule (tiers.py)."""
