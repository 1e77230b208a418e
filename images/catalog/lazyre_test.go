package catalog

import "testing"

func TestLazyRE(t *testing.T) {
	tests := []struct {
		pattern, input string
		want           bool
	}{
		{`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`, "v1.2.3_x", true},
		{`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`, ".hidden", false},
		{`^sha256:[0-9a-f]{64}$`, "sha256:abc", false},
	}
	for _, tt := range tests {
		if got := newLazyRE(tt.pattern).MatchString(tt.input); got != tt.want {
			t.Errorf("%q MatchString(%q) = %v, want %v", tt.pattern, tt.input, got, tt.want)
		}
	}
	bad := newLazyRE(`(`) // nothing compiled yet: no panic here
	defer func() {
		if recover() == nil {
			t.Error("an invalid pattern did not panic at its first use")
		}
	}()
	bad.MatchString("x")
}
