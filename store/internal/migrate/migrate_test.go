package migrate

import (
	"errors"
	"testing"
	"testing/fstest"

	"github.com/sandbox-agent/sandbox-agent/store"
)

func TestLoad(t *testing.T) {
	for _, tc := range []struct {
		name    string
		files   []string
		want    []int
		wantErr bool
	}{
		{"ordered", []string{"0002_b.sql", "0001_a.sql", "README"}, []int{1, 2}, false},
		{"gap", []string{"0001_a.sql", "0003_c.sql"}, nil, true},
		{"duplicate", []string{"0001_a.sql", "0001_b.sql"}, nil, true},
		{"zero", []string{"0000_a.sql"}, nil, true},
		{"bad name", []string{"init.sql"}, nil, true},
		{"none", []string{"README"}, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fsys := fstest.MapFS{}
			for _, f := range tc.files {
				fsys["m/"+f] = &fstest.MapFile{Data: []byte("-- " + f)}
			}
			ms, err := Load(fsys, "m")
			if (err != nil) != tc.wantErr {
				t.Fatalf("Load: %v, want error %v", err, tc.wantErr)
			}
			for i, m := range ms {
				if m.Version != tc.want[i] || m.SQL != "-- "+m.Name {
					t.Errorf("migration %d: %+v", i, m)
				}
			}
			if len(ms) != len(tc.want) {
				t.Errorf("got %d migrations, want %d", len(ms), len(tc.want))
			}
		})
	}
}

func TestNext(t *testing.T) {
	ms := []Migration{{Version: 1}, {Version: 2}}
	for current, want := range map[int]int{0: 1, 1: 2, 2: 0} {
		m, err := Next(ms, current)
		if err != nil || (m == nil) != (want == 0) || (m != nil && m.Version != want) {
			t.Errorf("Next(%d) = %v, %v; want version %d", current, m, err, want)
		}
	}
	if _, err := Next(ms, 3); !errors.Is(err, store.ErrSchemaTooNew) {
		t.Errorf("Next(3): %v, want ErrSchemaTooNew", err)
	}
}
