# Sourced by the e2e build scripts: sets GO to the Go toolchain (PATH first, then /usr/local/go), or to
# an empty string when there is none.
GO="$(command -v go || true)"
[ -n "$GO" ] || { [ -x /usr/local/go/bin/go ] && GO=/usr/local/go/bin/go; } || true
