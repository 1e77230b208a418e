package smoke

import "testing"

func TestLoopbackURL(t *testing.T) {
	tests := map[string]bool{
		"http://127.0.0.1:4000":     true,
		"http://localhost:4000/v1":  true,
		"http://[::1]:8080":         true,
		"http://127.1.2.3":          true,
		"https://api.example.com":   false,
		"http://10.0.0.1:4000":      false,
		"":                          false,
		"not a url":                 false,
		"http://0.0.0.0:4000":       false,
		"https://open.bigmodel.cn/": false,
	}
	for u, want := range tests {
		if got := LoopbackURL(u); got != want {
			t.Errorf("LoopbackURL(%q) = %v", u, got)
		}
	}
}
