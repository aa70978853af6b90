"""The tests of real pods on a cluster: kind (docs/development.md, "Tests by tier")."""
