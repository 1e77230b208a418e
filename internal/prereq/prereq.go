// Package prereq is what a test does when something it needs is missing
// (an engine, an image, a tool such as shellcheck or the go command): it
// fails under CI (CI=true), where every prerequisite is installed and a
// missing one is a broken set-up, and skips elsewhere, so a plain `go test`
// on a laptop runs what it can.
//
// It imports nothing but the standard library, so any test can use it,
// the root package's own (package sandboxagent) tests included.
package prereq

import (
	"os"
	"testing"
)

// InCI reports whether missing prerequisites fail rather than skip:
// CI=true in the environment.
func InCI() bool { return os.Getenv("CI") == "true" }

// Missing fails the test under CI=true and skips it elsewhere, with the
// message format and args (under CI prefixed by "CI=true and ").
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	if InCI() {
		t.Fatalf("CI=true and "+format, args...)
		return
	}
	t.Skipf(format, args...)
}
