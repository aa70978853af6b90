"""The tests that start real components on this machine (docs/development.md, "Tests by tier")."""
