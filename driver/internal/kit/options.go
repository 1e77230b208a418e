package kit

import "encoding/json"

// Secrets is the one-key answer of Driver.Secrets: none when key is "".
func Secrets(key string) []string {
	if key == "" {
		return nil
	}
	return []string{key}
}

// Retries is a retry-count option: n, with 0 meaning def and a negative
// value none.
func Retries(n, def int) int {
	switch {
	case n < 0:
		return 0
	case n == 0:
		return def
	}
	return n
}

// JSONFile is v as an indented JSON file (ending in a newline), the form
// of the configuration files drivers write.
func JSONFile(v any) ([]byte, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
