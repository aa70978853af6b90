"""The pure tests: no server, no subprocess of the CLI, no build (docs/development.md, "Tests by tier")."""
