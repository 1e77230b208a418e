package sandboxagent

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"testing"

	"github.com/sandbox-agent/sandbox-agent/internal/hardening"
)

// diskRuntime is a fakeRuntime whose engine enforces disk limits (quota
// nil) and measures use.
type diskRuntime struct {
	*fakeRuntime
	quota    error
	used     int64
	measures atomic.Int32
}

func (d *diskRuntime) DiskQuotas(context.Context) error { return d.quota }
func (d *diskRuntime) DiskUsage(context.Context, string) (int64, error) {
	d.measures.Add(1)
	return d.used, nil
}

func TestDiskLimit(t *testing.T) {
	cfg := DefaultConfig()
	cfg.DiskBytes = 2 << 30
	for _, tc := range []struct {
		name  string
		opts  SandboxOptions
		cfg   Config
		quota error
		want  int64
	}{
		{"default where the engine enforces", SandboxOptions{}, DefaultConfig(), nil, hardening.DefaultDiskBytes},
		{"no default where it cannot", SandboxOptions{}, DefaultConfig(), errors.New("overlay2"), 0},
		{"the config's", SandboxOptions{}, cfg, nil, 2 << 30},
		{"the options'", SandboxOptions{DiskBytes: 1 << 30}, cfg, nil, 1 << 30},
		{"none", SandboxOptions{DiskBytes: -1}, DefaultConfig(), nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &diskRuntime{fakeRuntime: &fakeRuntime{exec: func(context.Context, RuntimeExec) (int, error) { return 0, nil }}, quota: tc.quota}
			tc.opts.Image, tc.opts.Config = "img", tc.cfg
			sb, err := NewSandbox(context.Background(), f, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if got := f.created[0].DiskBytes; got != tc.want || sb.diskBytes != tc.want {
				t.Errorf("disk limit %d (sandbox %d), want %d", got, sb.diskBytes, tc.want)
			}
		})
	}
	// An engine that recorded no limit for one asked fails the start.
	f := &diskRuntime{fakeRuntime: &fakeRuntime{inspect: func(spec ContainerSpec) ContainerState {
		st := recorded(spec)
		st.DiskBytes = 0
		return st
	}}}
	var he *HardeningError
	if _, err := NewSandbox(context.Background(), f, SandboxOptions{Image: "img", DiskBytes: 1 << 30}); !errors.As(err, &he) || he.Setting != "disk" {
		t.Errorf("limit not recorded: %v", err)
	}
}

// A command that says it ran out of space is ErrDiskLimit only when the
// engine measures the sandbox at its limit: the words are the sandbox's.
func TestCheckDisk(t *testing.T) {
	const limit = 1 << 30
	for _, tc := range []struct {
		name   string
		limit  int64
		used   int64
		stderr string
		code   int
		want   bool
	}{
		{"at the limit", limit, limit - 1<<20, "dd: error writing '/x': No space left on device", 1, true},
		{"quota words", limit, limit, "write: Disk quota exceeded", 1, true},
		{"words, far from the limit", limit, limit / 2, "No space left on device", 1, false},
		{"at the limit, other failure", limit, limit, "permission denied", 1, false},
		{"succeeded", limit, limit, "No space left on device", 0, false},
		{"no limit", 0, limit, "No space left on device", 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &diskRuntime{fakeRuntime: &fakeRuntime{exec: func(_ context.Context, req RuntimeExec) (int, error) {
				if len(req.Cmd) == 3 { // the limit counters
					return 0, nil
				}
				io.WriteString(req.Stderr, tc.stderr)
				return tc.code, nil
			}}, used: tc.used}
			sb, err := NewSandbox(context.Background(), f, SandboxOptions{Image: "img", DiskBytes: -1})
			if err != nil {
				t.Fatal(err)
			}
			sb.diskBytes = tc.limit
			_, err = sb.Exec(context.Background(), []string{"dd"})
			var re *ResourceError
			if got := errors.Is(err, ErrDiskLimit) && errors.As(err, &re) && re.Limit == tc.limit; got != tc.want {
				t.Errorf("err %v, want ErrDiskLimit %v", err, tc.want)
			}
			// The sandbox's words make the engine measure at most once per
			// diskMeasureEvery: the second failure reuses the measure.
			_, err2 := sb.Exec(context.Background(), []string{"dd"})
			if errors.Is(err2, ErrDiskLimit) != tc.want || f.measures.Load() > 1 {
				t.Errorf("again: %v, after %d measures", err2, f.measures.Load())
			}
		})
	}
}
