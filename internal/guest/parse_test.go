package guest

import (
	"reflect"
	"testing"
)

func TestParseCounters(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want Counts
	}{
		{"v1 and v2 lines", "oom 2\npids 17\n", Counts{OOMKills: 2, PidsLimit: 17}},
		{"nothing readable", "", Counts{}},
		{"junk from a hostile container", "oom -5\npids x\noom\n\x00\npids 99999999999999999999\n", Counts{}},
		{"unknown keys", "max 3\noom_kill 4\n", Counts{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ParseCounters([]byte(tc.in)); got != tc.want {
				t.Errorf("ParseCounters(%q) = %+v, want %+v", tc.in, got, tc.want)
			}
		})
	}
}

func TestParseGroups(t *testing.T) {
	in := "1 (docker-init) S 0 1 1 0 -1\n" +
		"7 (bash) S 1 7 1 0 -1\n" + // the keepalive: the container's session
		"10 (sh) S 0 10 10 0 -1\n" +
		"16 (sh) R 10 10 10 0 -1\n" +
		"17 (a (b) c) S 1 10 10 0 -1\n" + // comm with spaces and parens
		"20 (node) S 0 20 20 0 -1\n" +
		"garbage\n" +
		"21 (x) S 0\n"
	want := map[int]int{10: 3, 20: 1}
	if got := Groups(in); !reflect.DeepEqual(got, want) {
		t.Errorf("Groups = %v, want %v", got, want)
	}
}

func TestParseValue(t *testing.T) {
	out := "current 97\nrefused 12\n30 (sh) R 0 30 30\ncurrent-ish 5\n"
	if c, r, none := Value(out, "current"), Value(out, "refused"), Value("30 (sh) R 0\n", "current"); c != 97 || r != 12 || none != -1 {
		t.Errorf("current %d refused %d missing %d; want 97 12 -1", c, r, none)
	}
	if v := Value("current -3\ncurrent x\n", "current"); v != -1 {
		t.Errorf("bad values parsed as %d", v)
	}
}

func TestParseListeners(t *testing.T) {
	out := "oom 0\npids 0\nlisten 1F90 0\nlisten 8AE1 1000\nlisten 0050 0\nlisten 0050 1000\nlisten 0050 0\n" +
		"listen 0000 0\nlisten ZZ 0\nlisten 10000 0\nlisten 1F91 -1\nlisten 1F92\nnoise listen 1F93 0\n"
	got := Listeners([]byte(out))
	want := map[int]int{8080: 0, 35553: 1000, 80: 1000}
	if len(got) != len(want) {
		t.Fatalf("Listeners = %v, want %v", got, want)
	}
	for p, u := range want {
		if got[p] != u {
			t.Errorf("port %d: uid %d, want %d (all: %v)", p, got[p], u, got)
		}
	}
}
