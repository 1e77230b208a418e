package sqlite

import (
	"encoding/json"
	"fmt"
	"time"
)

// Times are stored as INTEGER microseconds since the epoch (exact to well
// below the millisecond the contract asks, and good for ±290,000 years
// where nanoseconds would stop at 2262), NULL for the zero time. JSON is
// TEXT as given, NULL when empty.

func timeArg(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixMicro()
}

func jsonArg(b json.RawMessage) any {
	if len(b) == 0 {
		return nil
	}
	return string(b)
}

// scopesArg is a JSON array: the scopes are read back whole, never queried.
func scopesArg(scopes []string) any {
	if scopes == nil {
		scopes = []string{}
	}
	b, _ := json.Marshal(scopes) // strings always marshal
	return string(b)
}

// stored is t as a read gives it back.
func stored(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return time.UnixMicro(t.UnixMicro()).UTC()
}

// timeCol scans timeArg's column.
type timeCol struct{ t *time.Time }

func (c timeCol) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*c.t = time.Time{}
	case int64:
		*c.t = time.UnixMicro(v).UTC()
	default:
		return fmt.Errorf("time column: unexpected %T", src)
	}
	return nil
}

// jsonCol scans jsonArg's column.
type jsonCol struct{ b *json.RawMessage }

func (c jsonCol) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*c.b = nil
	case string:
		*c.b = json.RawMessage(v)
	case []byte:
		*c.b = append(json.RawMessage(nil), v...) // the driver may reuse v
	default:
		return fmt.Errorf("JSON column: unexpected %T", src)
	}
	return nil
}

// scopesCol scans scopesArg's column.
type scopesCol struct{ s *[]string }

func (c scopesCol) Scan(src any) error {
	var b []byte
	switch v := src.(type) {
	case string:
		b = []byte(v)
	case []byte:
		b = v
	default:
		return fmt.Errorf("scopes column: unexpected %T", src)
	}
	*c.s = nil
	if err := json.Unmarshal(b, c.s); err != nil {
		return fmt.Errorf("scopes column: %w", err)
	}
	if len(*c.s) == 0 {
		*c.s = nil
	}
	return nil
}
