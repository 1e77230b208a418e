package modelproxy

import (
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
)

// refRedact is the reference: scan left to right, at each position replace
// the longest secret that starts there.
func refRedact(s string, secrets []string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		l := 0
		for _, x := range secrets {
			if x != "" && strings.HasPrefix(s[i:], x) && len(x) > l {
				l = len(x)
			}
		}
		if l > 0 {
			b.WriteString(redacted)
			i += l
		} else {
			b.WriteByte(s[i])
			i++
		}
	}
	return b.String()
}

// stream feeds the chunks through a redactor and returns the output, and
// checks that what is held back after each chunk is a proper prefix of a
// secret (or nothing).
func stream(t *testing.T, secrets []string, chunks []string) string {
	t.Helper()
	r := newRedactor(secrets...)
	var out []byte
	for _, c := range chunks {
		out = r.write(out, []byte(c))
		if h := string(r.held); h != "" {
			ok := false
			for _, x := range secrets {
				ok = ok || len(h) < len(x) && strings.HasPrefix(x, h)
			}
			if !ok {
				t.Fatalf("holds %q, not a proper prefix of a secret", h)
			}
		}
	}
	return string(r.flush(out))
}

func TestRedactorEverySplit(t *testing.T) {
	key := "sk-real-KEY-do-not-leak-0123456789"
	secrets := []string{key, testToken}
	for _, s := range []string{
		"data: {\"echo\":\"" + key + "\"}\n\n",
		key,
		key + key,
		"x" + key[:10] + key + "y", // a false start right before the key
		key[:len(key)-1],           // a proper prefix at EOF is emitted as is
		"Bearer " + key + "\r\n" + testToken + "\n",
		"nothing secret here",
		"",
	} {
		want := refRedact(s, secrets)
		if strings.Contains(want, key) || strings.Contains(want, testToken) {
			t.Fatalf("reference leaks: %q", want)
		}
		// One split at every position, two splits at every pair, and
		// one byte at a time.
		for i := 0; i <= len(s); i++ {
			if got := stream(t, secrets, []string{s[:i], s[i:]}); got != want {
				t.Errorf("split at %d of %q: %q, want %q", i, s, got, want)
			}
			for j := i; j <= len(s) && len(s) < 80; j++ {
				if got := stream(t, secrets, []string{s[:i], s[i:j], s[j:]}); got != want {
					t.Errorf("split at %d,%d of %q: %q, want %q", i, j, s, got, want)
				}
			}
		}
		bytes := make([]string, len(s))
		for i := range s {
			bytes[i] = s[i : i+1]
		}
		if got := stream(t, secrets, bytes); got != want {
			t.Errorf("byte by byte %q: %q, want %q", s, got, want)
		}
	}
}

// TestRedactorOverlaps: secrets that overlap themselves and each other,
// random inputs over a small alphabet, random chunkings, against the
// reference.
func TestRedactorOverlaps(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, secrets := range [][]string{
		{"aab"}, {"abab"}, {"aaa"}, {"abcab", "bca"}, {"ab", "abab", "b"}, {"abc", "cab", "bcabc"}, {"a"},
		{"abba", "bb"}, {"abab", ""},
	} {
		for range 3000 {
			b := make([]byte, rng.IntN(24))
			for i := range b {
				b[i] = "abc"[rng.IntN(3)]
			}
			s := string(b)
			var chunks []string
			for rest := s; ; {
				n := rng.IntN(len(rest) + 2)
				if n >= len(rest) {
					chunks = append(chunks, rest)
					break
				}
				chunks = append(chunks, rest[:n])
				rest = rest[n:]
			}
			if got, want := stream(t, secrets, chunks), refRedact(s, secrets); got != want {
				t.Fatalf("secrets %q, chunks %q: %q, want %q", secrets, chunks, got, want)
			}
		}
	}
}

// TestRedactorHoldsOnlyPrefixes: a chunk that does not end in a secret's
// beginning is emitted whole and at once; one that does waits only for the
// next chunk.
func TestRedactorHoldsOnlyPrefixes(t *testing.T) {
	r := newRedactor("sk-secret-key-1", testToken)
	if got := string(r.write(nil, []byte("data: {\"a\":1}\n\n"))); got != "data: {\"a\":1}\n\n" {
		t.Errorf("an SSE event: %q", got)
	}
	if got := string(r.write(nil, []byte("event: x sk-sec"))); got != "event: x " || string(r.held) != "sk-sec" {
		t.Errorf("emitted %q, held %q", got, r.held)
	}
	if got := string(r.write(nil, []byte("ond\n"))); got != "sk-second\n" || len(r.held) != 0 {
		t.Errorf("after a false start: %q, held %q", got, r.held)
	}
	r.write(nil, []byte("sk-secret-key-"))
	if got := string(r.write(nil, []byte("1!"))); got != redacted+"!" {
		t.Errorf("completed across chunks: %q", got)
	}
	r.write(nil, []byte("tail s"))
	if got := string(r.flush(nil)); got != "s" {
		t.Errorf("flush: %q", got)
	}
}

func TestRedactShortKeyAndHeaders(t *testing.T) {
	// A short key is still a known string: redacted, innocent text too.
	r := newRedactor("abc", testToken)
	if got := r.string("xabcx abc"); got != "x"+redacted+"x "+redacted {
		t.Errorf("short key: %q", got)
	}
	h := http.Header{"Echo-Key": {"Bearer abc", "plain"}, "X-" + testToken: {"1"}, "Ok": {"fine"}}
	r.header(h)
	if h.Get("Echo-Key") != "Bearer "+redacted || h.Values("Echo-Key")[1] != "plain" || h.Get("Ok") != "fine" || len(h) != 2 {
		t.Errorf("headers %v", h)
	}
	r.header(nil) // no trailers
}
