package guest

import (
	"context"
	"strings"
	"testing"
	"time"
)

// A scan the engine could not start (exit 126, no output of ours) is no
// empty sandbox: KillBomb tries it again rather than find no bomb.
func TestKillBombRetriesScansThatNeverStarted(t *testing.T) {
	scan := "self 50\ncurrent 256\nrefused 9\n" +
		"60 (sh) S 1 60 60 0 -1\n61 (sh) S 60 60 60 0 -1\n62 (sh) S 60 60 60 0 -1\n"
	for _, tc := range []struct {
		name     string
		failures int
		want     bool
	}{
		{"starts at once", 0, true},
		{"engine refuses eight execs", 8, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			failures, killed := tc.failures, false
			run := func(cmd ...string) (string, int, error) {
				if failures > 0 {
					failures--
					return "", 126, nil
				}
				last := cmd[len(cmd)-1]
				if last == "-60" {
					killed = true
					return "kill 0\nself 70\ncurrent 3\nrefused 9\n", 0, nil
				}
				return scan, 0, nil
			}
			got, err := KillBomb(context.Background(), run, 256, true)
			if err != nil || got != tc.want || !killed {
				t.Fatalf("KillBomb = %v, %v (group killed %v); want %v, nil, killed", got, err, killed, tc.want)
			}
		})
	}
	t.Run("never starts", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		run := func(cmd ...string) (string, int, error) { return "", 126, nil }
		_, err := KillBomb(ctx, run, 256, true)
		if err == nil || !strings.Contains(err.Error(), "never started") {
			t.Fatalf("KillBomb = %v, want a scan that never started", err)
		}
	})
}
