package boundary

import (
	"os/exec"
	"testing"

	"github.com/sandbox-agent/sandbox-agent/internal/prereq"
)

// needPerl is the host's perl. Without it the test skips, but under
// CI=true it fails: CI must run it.
func needPerl(t *testing.T) string {
	t.Helper()
	perl, err := exec.LookPath("perl")
	if err != nil {
		prereq.Missing(t, "perl is not installed")
	}
	return perl
}

// The relays are valid perl (perl -c also loads the modules they use, all
// in perl-base).
func TestPerlScripts(t *testing.T) {
	perl := needPerl(t)
	for name, text := range map[string]string{"forward.pl": forwardScript, "tunnel.pl": tunnelScript} {
		if out, err := exec.Command(perl, "-Mstrict", "-Mwarnings", "-c", "-e", text).CombinedOutput(); err != nil {
			t.Errorf("perl -c %s: %v\n%s", name, err, out)
		}
	}
}
