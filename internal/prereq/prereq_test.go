package prereq

import (
	"testing"
)

// fakeT records what Missing does with a test.
type fakeT struct {
	testing.TB
	fatal, skip string
}

func (f *fakeT) Helper()                        {}
func (f *fakeT) Fatalf(format string, _ ...any) { f.fatal = format }
func (f *fakeT) Skipf(format string, _ ...any)  { f.skip = format }

func TestMissing(t *testing.T) {
	for _, tc := range []struct {
		ci        string
		wantFatal bool
	}{{"true", true}, {"", false}, {"false", false}, {"1", false}} {
		t.Setenv("CI", tc.ci)
		f := &fakeT{}
		Missing(f, "no %s", "engine")
		if got := f.fatal != ""; got != tc.wantFatal || (f.skip != "") == tc.wantFatal {
			t.Errorf("CI=%q: fatal %q skip %q", tc.ci, f.fatal, f.skip)
		}
		if InCI() != tc.wantFatal {
			t.Errorf("CI=%q: InCI() = %v", tc.ci, InCI())
		}
	}
}
