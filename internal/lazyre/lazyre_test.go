package lazyre

import (
	"regexp"
	"slices"
	"sync"
	"testing"
)

func TestSameAnswersAsRegexp(t *testing.T) {
	tests := []struct {
		pattern, input string
	}{
		{`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`, "ses_abc.1"},
		{`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`, "../etc"},
		{`…\d+ \w+ truncated…`, "a…12 lines truncated…b…3 bytes truncated…c"},
		{`(?s)^The command '(.*)' returned a non-zero code: (\d+)$`, "The command 'x\ny' returned a non-zero code: 2"},
		{`x`, ""},
	}
	for _, tt := range tests {
		want := regexp.MustCompile(tt.pattern)
		got := New(tt.pattern)
		if got.String() != want.String() {
			t.Errorf("String() = %q, want %q", got.String(), want.String())
		}
		if g, w := got.MatchString(tt.input), want.MatchString(tt.input); g != w {
			t.Errorf("%q MatchString(%q) = %v, want %v", tt.pattern, tt.input, g, w)
		}
		if g, w := got.Split(tt.input, -1), want.Split(tt.input, -1); !slices.Equal(g, w) {
			t.Errorf("%q Split(%q) = %q, want %q", tt.pattern, tt.input, g, w)
		}
		if g, w := got.FindStringIndex(tt.input), want.FindStringIndex(tt.input); !slices.Equal(g, w) {
			t.Errorf("%q FindStringIndex(%q) = %v, want %v", tt.pattern, tt.input, g, w)
		}
		if g, w := got.FindStringSubmatch(tt.input), want.FindStringSubmatch(tt.input); !slices.Equal(g, w) {
			t.Errorf("%q FindStringSubmatch(%q) = %q, want %q", tt.pattern, tt.input, g, w)
		}
	}
}

func TestCompiledOnceAtFirstUse(t *testing.T) {
	r := New(`^a+$`)
	if r.re != nil {
		t.Fatal("compiled before its first use")
	}
	var wg sync.WaitGroup
	res := make([]*regexp.Regexp, 8)
	for i := range res {
		wg.Go(func() { res[i] = r.Get() })
	}
	wg.Wait()
	for _, re := range res {
		if re == nil || re != res[0] {
			t.Fatalf("Get returned different values: %p, %p", re, res[0])
		}
	}
}

func TestInvalidPatternPanicsAtFirstUse(t *testing.T) {
	r := New(`(`) // no panic here: nothing compiled yet
	defer func() {
		if recover() == nil {
			t.Error("an invalid pattern did not panic at its first use")
		}
	}()
	r.MatchString("x")
}
