package kit

import (
	"sort"
	"strconv"
	"strings"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
)

// ParseTime reads a file time as find's %T@ (or stat's %Y) prints it:
// seconds since the epoch, with an optional fraction.
func ParseTime(s string) (time.Time, bool) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return time.Time{}, false
	}
	sec := int64(f)
	return time.Unix(sec, int64((f-float64(sec))*1e9)).UTC(), true
}

// Updated is t as SessionInfo.Updated shows it.
func Updated(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// ParseList reads the lines "mtime<TAB>path<TAB>record" a session list
// script prints (mtime as find's %T@; record, optional, the line of the
// session file that holds its title). id gives the session id of a path
// ("" skips the line); title the title in a record. The sessions come
// newest first.
func ParseList(out []byte, id func(path string) string, title func(record []byte) string) []sandboxagent.SessionInfo {
	type item struct {
		info sandboxagent.SessionInfo
		t    time.Time
	}
	var items []item
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.SplitN(l, "\t", 3)
		if len(f) < 2 {
			continue
		}
		sid := id(f[1])
		if sid == "" {
			continue
		}
		it := item{info: sandboxagent.SessionInfo{ID: sid, Path: f[1]}}
		if t, ok := ParseTime(f[0]); ok {
			it.t = t
			it.info.Updated = Updated(t)
		}
		if len(f) == 3 && f[2] != "" {
			it.info.Title = title([]byte(f[2]))
		}
		items = append(items, it)
	}
	sort.SliceStable(items, func(i, j int) bool { return items[i].t.After(items[j].t) })
	infos := make([]sandboxagent.SessionInfo, len(items))
	for i, it := range items {
		infos[i] = it.info
	}
	return infos
}

// Title is s cut to at most max runes (the last one "…"); max 0 keeps it
// whole.
func Title(s string, max int) string {
	if r := []rune(s); max > 0 && len(r) > max {
		s = string(r[:max-1]) + "…"
	}
	return s
}
