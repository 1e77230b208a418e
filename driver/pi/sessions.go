package pi

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/internal/kit"
)

// Where pi keeps things, relative to $HOME.
// (The session scripts, scripts/*.sh, name the same folders.)
const (
	agentDir    = ".pi/agent"
	sessionsDir = agentDir + "/sessions"
)

// Dump file names and meta keys.
const (
	dumpSession = "session.jsonl"
	metaCwd     = "cwd"
	metaFile    = "file"
)

// maxSessionFile caps one session file read back from the sandbox.
const maxSessionFile = 256 << 20

var (
	// sh runs scripts in the sandbox; its files are under $HOME.
	sh  = kit.Shell{Driver: "pi"}
	ids = kit.SessionIDs{Driver: "pi", Form: "a UUID", Valid: validID}
	// validID: pi's session ids are UUIDs.
	validID = kit.IsUUID
)

// newID is a UUID version 7 (time-ordered), the form pi uses.
func newID(now time.Time) (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[6:]); err != nil {
		return "", err
	}
	ms := uint64(now.UnixMilli())
	var t [8]byte
	binary.BigEndian.PutUint64(t[:], ms)
	copy(b[0:6], t[2:8])
	b[6] = b[6]&0x0f | 0x70
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]), nil
}

// projectDir is pi's session folder name for a working directory:
// "--" + cwd without its leading "/" and with "/", "\" and ":" as "-" + "--".
func projectDir(cwd string) string {
	s := strings.TrimPrefix(cwd, "/")
	s = strings.NewReplacer("/", "-", "\\", "-", ":", "-").Replace(s)
	return "--" + s + "--"
}

// fileName is pi's session file name: <ISO time with ":" and "." as "-">_<id>.jsonl.
func fileName(t time.Time, id string) string {
	ts := strings.NewReplacer(":", "-", ".", "-").Replace(t.UTC().Format("2006-01-02T15:04:05.000Z"))
	return ts + "_" + id + ".jsonl"
}

// find returns the absolute path of session id's file.
func find(ctx context.Context, c sandboxagent.ContainerOps, id string) (string, error) {
	out, _, err := ids.Run(ctx, c, sh, findScript, id)
	if err != nil {
		return "", err
	}
	p := strings.TrimSpace(string(out))
	if !path.IsAbs(p) {
		return "", fmt.Errorf("pi: session %s: unexpected path %q", id, p)
	}
	return p, nil
}

// header is a session file's first line, kept whole so that fields this
// package does not know survive a rewrite.
type header map[string]json.RawMessage

func splitHeader(data []byte) (header, []byte, error) {
	first, rest, _ := bytes.Cut(data, []byte("\n"))
	var h header
	if err := json.Unmarshal(first, &h); err != nil {
		return nil, nil, fmt.Errorf("pi: session file header: %w", err)
	}
	var typ string
	if json.Unmarshal(h["type"], &typ) != nil || typ != "session" {
		return nil, nil, fmt.Errorf("pi: session file does not start with a session header")
	}
	return h, rest, nil
}

func (h header) str(k string) string {
	var s string
	_ = json.Unmarshal(h[k], &s)
	return s
}

func (h header) set(k, v string) {
	b, _ := json.Marshal(v)
	h[k] = b
}

// join puts a rewritten header back in front of the entries.
func (h header) join(rest []byte) ([]byte, error) {
	// Keep pi's field order for the known fields.
	var b bytes.Buffer
	b.WriteByte('{')
	keys := make([]string, 0, len(h))
	order := map[string]int{"type": 0, "version": 1, "id": 2, "timestamp": 3, "cwd": 4, "parentSession": 5}
	for k := range h {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		oi, iok := order[keys[i]]
		oj, jok := order[keys[j]]
		switch {
		case iok && jok:
			return oi < oj
		case iok != jok:
			return iok
		}
		return keys[i] < keys[j]
	})
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteByte(':')
		var v bytes.Buffer
		if err := json.Compact(&v, h[k]); err != nil {
			return nil, err
		}
		b.Write(v.Bytes())
	}
	b.WriteString("}\n")
	b.Write(rest)
	return b.Bytes(), nil
}

// home is the sandbox user's home directory and the working directory
// commands (and so pi) run in.
func where(ctx context.Context, c sandboxagent.ContainerOps) (home, cwd string, err error) {
	out, _, err := sh.Run(ctx, c, nil, `printf '%s\n%s' "$HOME" "$(pwd -P)"`)
	if err != nil {
		return "", "", err
	}
	h, w, _ := strings.Cut(string(out), "\n")
	if !path.IsAbs(h) || !path.IsAbs(w) {
		return "", "", fmt.Errorf("pi: sandbox has no usable HOME or working directory (%q, %q)", h, w)
	}
	return h, w, nil
}

// relHome is p relative to home, for writeHomeFile.
func relHome(home, p string) (string, error) {
	rel, ok := strings.CutPrefix(p, strings.TrimSuffix(home, "/")+"/")
	if !ok || !fs.ValidPath(rel) {
		return "", fmt.Errorf("pi: %q is not under %q", p, home)
	}
	return rel, nil
}

var _ sandboxagent.Forker = (*Driver)(nil)

// Fork copies session id into a new session beside it: the same entries
// under a new header (new id and time, parentSession = the original file),
// which is what pi's own --fork writes. The original is never touched.
func (d *Driver) Fork(ctx context.Context, c sandboxagent.ContainerOps, id string) (string, error) {
	p, err := find(ctx, c, id)
	if err != nil {
		return "", err
	}
	data, err := c.ReadFile(ctx, p, maxSessionFile)
	if err != nil {
		return "", fmt.Errorf("pi: read session %s: %w", id, err)
	}
	h, rest, err := splitHeader(data)
	if err != nil {
		return "", err
	}
	now := time.Now()
	nid, err := newID(now)
	if err != nil {
		return "", err
	}
	h.set("id", nid)
	h.set("timestamp", now.UTC().Format("2006-01-02T15:04:05.000Z"))
	h.set("parentSession", p)
	out, err := h.join(rest)
	if err != nil {
		return "", err
	}
	home, _, err := where(ctx, c)
	if err != nil {
		return "", err
	}
	rel, err := relHome(home, path.Join(path.Dir(p), fileName(now, nid)))
	if err != nil {
		return "", err
	}
	if err := sh.WriteFile(ctx, c, rel, out, 0o644); err != nil {
		return "", err
	}
	return nid, nil
}

var _ sandboxagent.SessionStore = (*Driver)(nil)

// ListSessions lists every session file under ~/.pi/agent/sessions,
// newest first; Title is the session's first prompt.
func (d *Driver) ListSessions(ctx context.Context, c sandboxagent.ContainerOps) ([]sandboxagent.SessionInfo, error) {
	out, _, err := sh.Run(ctx, c, nil, listScript)
	if err != nil {
		return nil, err
	}
	type item struct {
		info  sandboxagent.SessionInfo
		mtime int64
	}
	var items []item
	var cur *item
	for _, l := range strings.Split(string(out), "\n") {
		tag, rest, ok := strings.Cut(l, "\t")
		if !ok {
			continue
		}
		switch tag {
		case "F":
			p, mt, _ := strings.Cut(rest, "\t")
			n, _ := strconv.ParseInt(mt, 10, 64)
			items = append(items, item{info: sandboxagent.SessionInfo{Path: p}, mtime: n})
			cur = &items[len(items)-1]
			if n > 0 {
				cur.info.Updated = kit.Updated(time.Unix(n, 0))
			}
		case "H":
			if cur == nil {
				continue
			}
			var h struct {
				Type string `json:"type"`
				ID   string `json:"id"`
			}
			if json.Unmarshal([]byte(rest), &h) == nil && h.Type == "session" {
				cur.info.ID = h.ID
			}
		case "U":
			if cur == nil {
				continue
			}
			var e struct {
				Message *message `json:"message"`
			}
			if json.Unmarshal([]byte(rest), &e) == nil && e.Message != nil {
				if bs, err := blocks(e.Message.Content); err == nil {
					for _, b := range bs {
						if b.Type == "text" && b.Text != "" {
							cur.info.Title = title(b.Text)
							break
						}
					}
				}
			}
		}
	}
	var res []sandboxagent.SessionInfo
	sort.SliceStable(items, func(i, j int) bool { return items[i].mtime > items[j].mtime })
	for _, it := range items {
		if it.info.ID != "" {
			res = append(res, it.info)
		}
	}
	return res, nil
}

// title is the first line of a prompt, at most 100 runes and "…".
func title(s string) string { return kit.Title(kit.FirstLine(s), 101) }

// DeleteSession removes session id's file.
func (d *Driver) DeleteSession(ctx context.Context, c sandboxagent.ContainerOps, id string) error {
	_, _, err := ids.Run(ctx, c, sh, deleteScript, id)
	return err
}

// DumpSession captures session id: Files["session.jsonl"] is its file;
// Meta["cwd"] its working directory, Meta["file"] its file name.
func (d *Driver) DumpSession(ctx context.Context, c sandboxagent.ContainerOps, id string) (sandboxagent.SessionDump, error) {
	p, err := find(ctx, c, id)
	if err != nil {
		return sandboxagent.SessionDump{}, err
	}
	data, err := c.ReadFile(ctx, p, maxSessionFile)
	if err != nil {
		return sandboxagent.SessionDump{}, fmt.Errorf("pi: read session %s: %w", id, err)
	}
	h, _, err := splitHeader(data)
	if err != nil {
		return sandboxagent.SessionDump{}, err
	}
	return sandboxagent.SessionDump{
		Driver:    d.Name(),
		SessionID: id,
		Files:     map[string][]byte{dumpSession: data},
		Meta:      map[string]string{metaCwd: h.str("cwd"), metaFile: path.Base(p)},
	}, nil
}

// LoadSession installs a dumped session under the same id, in the session
// folder of this sandbox's working directory (its header's cwd is
// rewritten to that directory, since pi only resumes by id the sessions of
// the directory it runs in). It is refused when that id exists there.
func (d *Driver) LoadSession(ctx context.Context, c sandboxagent.ContainerOps, dump sandboxagent.SessionDump) (string, error) {
	if err := ids.CheckDump(dump); err != nil {
		return "", err
	}
	id := dump.SessionID
	data, err := ids.DumpFile(dump, dumpSession)
	if err != nil {
		return "", err
	}
	h, rest, err := splitHeader(data)
	if err != nil {
		return "", err
	}
	if got := h.str("id"); got != id {
		return "", fmt.Errorf("%w: pi session dump: header id %q, want %q", sandboxagent.ErrInvalidArgument, got, id)
	}
	home, cwd, err := where(ctx, c)
	if err != nil {
		return "", err
	}
	if err := ids.CheckAbsent(ctx, c, sh, findScript, id); err != nil {
		return "", err
	}
	h.set("cwd", cwd)
	out, err := h.join(rest)
	if err != nil {
		return "", err
	}
	name := dump.Meta[metaFile]
	if name == "" || path.Base(name) != name || !strings.HasSuffix(name, "_"+id+".jsonl") {
		name = fileName(time.Now(), id)
	}
	rel, err := relHome(home, path.Join(home, sessionsDir, projectDir(cwd), name))
	if err != nil {
		return "", err
	}
	if err := sh.WriteFile(ctx, c, rel, out, 0o644); err != nil {
		return "", err
	}
	return id, nil
}
