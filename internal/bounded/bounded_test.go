package bounded

import (
	"strings"
	"testing"
)

func TestBuffer(t *testing.T) {
	tests := []struct {
		max    int64
		writes []string
		want   string
		trunc  bool
	}{
		{10, []string{"abc", "def"}, "abcdef", false},
		{4, []string{"abc", "def"}, "abcd", true},
		{3, []string{"abc", ""}, "abc", false},
		{3, []string{"abc", "d"}, "abc", true},
	}
	for _, tt := range tests {
		c := &Buffer{Max: tt.max}
		for _, w := range tt.writes {
			if n, err := c.Write([]byte(w)); n != len(w) || err != nil {
				t.Fatalf("Write = %d, %v", n, err)
			}
		}
		if string(c.Bytes()) != tt.want || c.Truncated() != tt.trunc {
			t.Errorf("max %d %v: got %q %v", tt.max, tt.writes, c.Bytes(), c.Truncated())
		}
	}
}

func TestLines(t *testing.T) {
	var got []string
	l := &Lines{Max: 5, Fn: func(b []byte, cut bool) {
		s := string(b)
		if cut {
			s += "~"
		}
		got = append(got, s)
	}}
	for _, w := range []string{"ab", "c\nde", "\n\n0123456789\nxy"} {
		l.Write([]byte(w))
	}
	l.Flush()
	if strings.Join(got, "|") != "abc|de||01234~|xy" {
		t.Errorf("got %q", got)
	}
}
