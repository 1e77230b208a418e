package dsh

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/internal/kit"
)

// Dump file names and meta keys.
const (
	dumpLog     = "session.jsonl"
	dumpFiles   = "files/" // other files of the session's folder
	metaProject = "project"
	metaCWD     = "cwd"
)

// maxLog caps one session file read back from the sandbox.
const maxLog = 256 << 20

var (
	// sh runs scripts in the sandbox with $H = $DSH_HOME; it creates
	// folders with mode 700, as dsh does.
	sh  = kit.Shell{Driver: "dsh", Dir: homeExpr, DirUmask: "077"}
	ids = kit.SessionIDs{Driver: "dsh", Form: "session-<uuid>", Valid: validID}
)

// dshHomeDir is $DSH_HOME in the sandbox, an absolute path.
func dshHomeDir(ctx context.Context, c sandboxagent.ContainerOps) (string, error) {
	out, _, err := sh.Run(ctx, c, nil, `printf '%s' "$H"`)
	if err != nil {
		return "", err
	}
	h := strings.TrimSpace(string(out))
	if !path.IsAbs(h) || strings.ContainsAny(h, "\"\n\\") {
		return "", fmt.Errorf("dsh: sandbox user has no usable DSH_HOME/HOME (%q)", h)
	}
	return path.Clean(h), nil
}

var _ sandboxagent.Forker = (*Driver)(nil)

// Fork copies session id's folder into a new session beside it, with the
// new id in the log's header; dsh then resumes it as any other session.
// The copy shares nothing with the original.
func (d *Driver) Fork(ctx context.Context, c sandboxagent.ContainerOps, id string) (string, error) {
	nid, err := newID()
	if err != nil {
		return "", err
	}
	return ids.Copy(ctx, c, sh, forkScript, id, nid)
}

var _ sandboxagent.SessionStore = (*Driver)(nil)

// ListSessions lists every session log under $DSH_HOME/sessions, newest
// first, titled with the session's latest title.
func (d *Driver) ListSessions(ctx context.Context, c sandboxagent.ContainerOps) ([]sandboxagent.SessionInfo, error) {
	out, _, err := sh.Run(ctx, c, nil, listScript)
	if err != nil {
		return nil, err
	}
	return parseList(out), nil
}

// parseList reads the lines "mtime<TAB>path<TAB>session/title record".
func parseList(out []byte) []sandboxagent.SessionInfo {
	return kit.ParseList(out, func(p string) string {
		if id := path.Base(path.Dir(p)); validID(id) {
			return id
		}
		return ""
	}, func(record []byte) string {
		var r struct {
			Data struct {
				Title string `json:"title"`
			} `json:"data"`
		}
		if json.Unmarshal(record, &r) != nil {
			return ""
		}
		return kit.Fold(r.Data.Title)
	})
}

// DeleteSession removes the session's folder.
func (d *Driver) DeleteSession(ctx context.Context, c sandboxagent.ContainerOps, id string) error {
	_, _, err := ids.Run(ctx, c, sh, deleteScript, id)
	return err
}

// DumpSession reads the session's folder: its log and any other file.
func (d *Driver) DumpSession(ctx context.Context, c sandboxagent.ContainerOps, id string) (sandboxagent.SessionDump, error) {
	out, _, err := ids.Run(ctx, c, sh, dumpScript, id)
	if err != nil {
		return sandboxagent.SessionDump{}, err
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	file := lines[0]
	if !path.IsAbs(file) {
		return sandboxagent.SessionDump{}, fmt.Errorf("dsh: dump %s: unexpected path %q", id, file)
	}
	dir := path.Dir(file)
	dump := sandboxagent.SessionDump{
		Driver: d.Name(), SessionID: id, Files: map[string][]byte{},
		Meta: map[string]string{metaProject: path.Base(path.Dir(dir))},
	}
	data, err := c.ReadFile(ctx, file, maxLog)
	if err != nil {
		return sandboxagent.SessionDump{}, fmt.Errorf("dsh: dump %s: %w", id, err)
	}
	dump.Files[dumpLog] = data
	if h, err := header(data); err == nil && h.CWD != "" {
		dump.Meta[metaCWD] = h.CWD
	}
	for _, rel := range lines[1:] {
		if rel == "" || !fs.ValidPath(rel) {
			continue
		}
		b, err := c.ReadFile(ctx, path.Join(dir, rel), maxLog)
		if err != nil {
			return sandboxagent.SessionDump{}, fmt.Errorf("dsh: dump %s: %w", id, err)
		}
		dump.Files[dumpFiles+rel] = b
	}
	return dump, nil
}

// logHeader is the first line of a session log.
type logHeader struct {
	Type string `json:"type"`
	ID   string `json:"id"`
	CWD  string `json:"cwd"`
}

func header(log []byte) (logHeader, error) {
	first, _, _ := bytes.Cut(log, []byte("\n"))
	var h logHeader
	if err := json.Unmarshal(first, &h); err != nil {
		return h, err
	}
	if h.Type != "session" {
		return h, fmt.Errorf("first line is not a session header")
	}
	return h, nil
}

// LoadSession installs a dump under $DSH_HOME/sessions/<project of its
// cwd>/<id>/ (dsh finds a session by id in any project folder but insists
// that the folder match the header's cwd); it refuses to replace a
// session of that id.
func (d *Driver) LoadSession(ctx context.Context, c sandboxagent.ContainerOps, dump sandboxagent.SessionDump) (string, error) {
	if err := ids.CheckDump(dump); err != nil {
		return "", err
	}
	id := dump.SessionID
	log, err := ids.DumpFile(dump, dumpLog)
	if err != nil {
		return "", err
	}
	h, err := header(log)
	if err != nil {
		return "", fmt.Errorf("%w: dsh session dump: %v", sandboxagent.ErrInvalidArgument, err)
	}
	if h.ID != id {
		return "", fmt.Errorf("%w: dsh session dump of %s holds session %q", sandboxagent.ErrInvalidArgument, id, h.ID)
	}
	project := "_no-cwd"
	if h.CWD != "" {
		project = projectKey(h.CWD)
	}
	for name := range dump.Files {
		if name == dumpLog {
			continue
		}
		rel, ok := strings.CutPrefix(name, dumpFiles)
		if !ok || !fs.ValidPath(rel) || rel == dumpLog {
			return "", fmt.Errorf("%w: dsh session dump file %q", sandboxagent.ErrInvalidArgument, name)
		}
	}
	if err := ids.CheckAbsent(ctx, c, sh, findScript, id); err != nil {
		return "", err
	}
	base := path.Join(sessionsDir, project, id)
	names := make([]string, 0, len(dump.Files))
	for n := range dump.Files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		if rel, ok := strings.CutPrefix(name, dumpFiles); ok {
			if err := sh.WriteFile(ctx, c, path.Join(base, rel), dump.Files[name], 0o600); err != nil {
				return "", fmt.Errorf("dsh: load %s: %w", id, err)
			}
		}
	}
	// The log last: a half-loaded session is not resumable.
	if err := sh.WriteFile(ctx, c, path.Join(base, dumpLog), log, 0o600); err != nil {
		return "", fmt.Errorf("dsh: load %s: %w", id, err)
	}
	return id, nil
}

// projectKey is dsh's project folder name for a working directory (as in
// @deepseek-ai/dsh-session-persistence-jsonl): separators become one "-",
// other characters outside [A-Za-z0-9._-] become ~XXXX (UTF-16 code units),
// leading dashes go, and the result is cut to 251 characters inside "--".
func projectKey(cwd string) string {
	var b strings.Builder
	sep := false
	for _, u := range utf16Units(cwd) {
		switch {
		case u == '/' || u == '\\' || u == ':':
			if !sep {
				b.WriteByte('-')
			}
			sep = true
		case u < 128 && (u >= 'a' && u <= 'z' || u >= 'A' && u <= 'Z' || u >= '0' && u <= '9' || u == '.' || u == '_' || u == '-'):
			b.WriteByte(byte(u))
			sep = false
		default:
			fmt.Fprintf(&b, "~%04X", u)
			sep = false
		}
	}
	s := strings.TrimLeft(b.String(), "-")
	if s == "" {
		s = "root"
	}
	if len(s) > 251 {
		s = s[:251]
	}
	return "--" + s + "--"
}

func utf16Units(s string) []uint16 {
	var out []uint16
	for _, r := range s {
		if r >= 0x10000 {
			r -= 0x10000
			out = append(out, uint16(0xD800+(r>>10)), uint16(0xDC00+(r&0x3FF)))
		} else {
			out = append(out, uint16(r))
		}
	}
	return out
}
