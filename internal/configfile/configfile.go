// Package configfile reads sandbox-agent's configuration file and
// environment into a value through a table of keys. The library's Config
// and the command line's own settings each have a table; one file
// (~/.config/sandbox-agent/config.json) and one documented key list hold
// both. Precedence: environment > file > whatever the value held before.
package configfile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Key is one configuration key: its name in the file, its environment
// variable, and how a raw value is applied to a T.
type Key[T any] struct {
	Name  string
	Env   string
	Apply func(c *T, raw string) error
	// Object: the file may give a JSON object, applied as its compact
	// JSON (the environment variable's form).
	Object bool
}

// Error is an invalid value, naming the key and where it came from (a
// file path or "environment variable X"). Key is empty when the file as a
// whole is unusable.
type Error struct {
	Key    string
	Source string
	Err    error
}

func (e *Error) Error() string {
	if e.Key == "" {
		return fmt.Sprintf("config %s: %v", e.Source, e.Err)
	}
	return fmt.Sprintf("config key %q from %s: %v", e.Key, e.Source, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// EnvName is the environment variable of a key that has no historical
// name of its own: SANDBOX_AGENT_<KEY>.
func EnvName(key string) string { return "SANDBOX_AGENT_" + strings.ToUpper(key) }

// Load applies the file at path (a missing file is fine; "" means none)
// and then the environment to c, through keys. others names the keys of
// the same file that another table reads: they are accepted and left
// alone; any other unknown key is an error (a typo must not pass
// silently).
func Load[T any](c *T, path string, getenv func(string) string, keys []Key[T], others []string) error {
	if path != "" {
		if err := applyFile(c, path, keys, others); err != nil {
			return err
		}
	}
	for _, k := range keys {
		raw := getenv(k.Env)
		if raw == "" {
			continue
		}
		if err := k.Apply(c, raw); err != nil {
			return &Error{Key: k.Name, Source: "environment variable " + k.Env, Err: err}
		}
	}
	return nil
}

func applyFile[T any](c *T, path string, keys []Key[T], others []string) error {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return &Error{Source: path, Err: err}
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return &Error{Source: path, Err: fmt.Errorf("not a JSON object: %w", err)}
	}
	known := make(map[string]Key[T], len(keys))
	for _, k := range keys {
		known[k.Name] = k
	}
	names := make([]string, 0, len(raw))
	for name := range raw {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		k, ok := known[name]
		if !ok {
			if slices.Contains(others, name) {
				continue
			}
			return &Error{Key: name, Source: path, Err: errors.New("unknown key")}
		}
		s, err := scalar(raw[name], k.Object)
		if err != nil {
			return &Error{Key: name, Source: path, Err: err}
		}
		if err := k.Apply(c, s); err != nil {
			return &Error{Key: name, Source: path, Err: err}
		}
	}
	return nil
}

// scalar turns a JSON string, number, boolean or array of strings into
// the text form the environment would carry (an array: comma-separated).
func scalar(raw json.RawMessage, object bool) (string, error) {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", err
	}
	switch t := v.(type) {
	case []any:
		parts := make([]string, 0, len(t))
		for _, e := range t {
			s, ok := e.(string)
			if !ok || strings.Contains(s, ",") {
				return "", fmt.Errorf("want an array of strings without commas, got %s", raw)
			}
			parts = append(parts, s)
		}
		return strings.Join(parts, ","), nil
	case string:
		return t, nil
	case float64:
		return strconv.FormatFloat(t, 'f', -1, 64), nil
	case bool:
		return strconv.FormatBool(t), nil
	case map[string]any:
		if !object {
			break
		}
		// An object travels as its JSON, as the environment carries it.
		var b bytes.Buffer
		if err := json.Compact(&b, raw); err != nil {
			return "", err
		}
		return b.String(), nil
	}
	return "", fmt.Errorf("want a string, number or boolean, got %s", raw)
}

// Duration is a key holding a positive duration: a Go duration ("90s",
// "1h30m") or plain seconds.
func Duration[T any](name string, field func(*T) *time.Duration) Key[T] {
	return Key[T]{Name: name, Env: EnvName(name), Apply: func(c *T, raw string) error {
		d, err := ParseDuration(raw)
		if err != nil {
			return err
		}
		*field(c) = d
		return nil
	}}
}

// String is a key holding any text.
func String[T any](name, env string, field func(*T) *string) Key[T] {
	return Key[T]{Name: name, Env: env, Apply: func(c *T, raw string) error {
		*field(c) = raw
		return nil
	}}
}

// List is a key holding a list: comma-separated in the environment, a
// JSON array (or a comma-separated string) in the file. check validates
// the whole list.
func List[T any](name, env string, field func(*T) *[]string, check func([]string) error) Key[T] {
	return Key[T]{Name: name, Env: env, Apply: func(c *T, raw string) error {
		var list []string
		for _, p := range strings.Split(raw, ",") {
			if p = strings.TrimSpace(p); p != "" {
				list = append(list, p)
			}
		}
		if check != nil {
			if err := check(list); err != nil {
				return err
			}
		}
		*field(c) = list
		return nil
	}}
}

// Int is a key holding an integer of at least min.
func Int[T any](name string, min int64, set func(*T, int64)) Key[T] {
	return Key[T]{Name: name, Env: EnvName(name), Apply: func(c *T, raw string) error {
		n, err := strconv.ParseInt(strings.TrimSpace(raw), 10, 64)
		if err != nil {
			return fmt.Errorf("not an integer: %q", raw)
		}
		if n < min {
			return fmt.Errorf("must be at least %d, got %d", min, n)
		}
		set(c, n)
		return nil
	}}
}

// Bool is a key holding a boolean (strconv.ParseBool's forms).
func Bool[T any](name, env string, field func(*T) *bool) Key[T] {
	return Key[T]{Name: name, Env: env, Apply: func(c *T, raw string) error {
		b, err := strconv.ParseBool(strings.TrimSpace(raw))
		if err != nil {
			return fmt.Errorf("not a boolean: %q", raw)
		}
		*field(c) = b
		return nil
	}}
}

// ParseDuration accepts Go durations ("90s", "1h30m") and plain seconds;
// zero and negative values are refused.
func ParseDuration(raw string) (time.Duration, error) {
	raw = strings.TrimSpace(raw)
	if secs, err := strconv.ParseFloat(raw, 64); err == nil {
		if secs <= 0 {
			return 0, fmt.Errorf("must be positive, got %q", raw)
		}
		return time.Duration(secs * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(raw)
	if err != nil {
		return 0, fmt.Errorf("not a duration (e.g. 90s, 5m, or seconds): %q", raw)
	}
	if d <= 0 {
		return 0, fmt.Errorf("must be positive, got %q", raw)
	}
	return d, nil
}
