package server

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"path"
	"strconv"
	"strings"
	"unicode/utf8"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/store"
)

type execRequest struct {
	Cmd     []string          `json:"cmd"`
	Timeout float64           `json:"timeout,omitempty"` // seconds
	Env     map[string]string `json:"env,omitempty"`
	WorkDir string            `json:"workdir,omitempty"`
}

// execResult is the JSON of a command's outcome. Field names are a public
// interface.
type execResult struct {
	ExitCode   int    `json:"exit_code"`
	Stdout     string `json:"stdout"`
	Stderr     string `json:"stderr"`
	TimedOut   bool   `json:"timed_out"`
	Truncated  bool   `json:"truncated"`
	DurationMS int64  `json:"duration_ms"`
}

func (s *Server) exec(w http.ResponseWriter, r *http.Request, a *agent, _ store.Agent) {
	var req execRequest
	if err := decode(r, &req); err != nil {
		writeError(w, err)
		return
	}
	if len(req.Cmd) == 0 || req.Cmd[0] == "" {
		writeError(w, badRequest("cmd: want a non-empty argv array"))
		return
	}
	timeout, err := seconds("timeout", req.Timeout)
	if err != nil {
		writeError(w, err)
		return
	}
	if req.WorkDir != "" && !path.IsAbs(req.WorkDir) {
		writeError(w, badRequest("workdir %q: want an absolute path", req.WorkDir))
		return
	}
	res, err := a.ag.Container().Run(r.Context(), sandboxagent.ExecRequest{Cmd: req.Cmd, Env: req.Env, WorkDir: req.WorkDir, Timeout: timeout})
	if err != nil && !res.TimedOut {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, execResult{
		ExitCode: res.ExitCode, Stdout: validUTF8(res.Stdout), Stderr: validUTF8(res.Stderr),
		TimedOut: res.TimedOut, Truncated: res.Truncated, DurationMS: res.Duration.Milliseconds(),
	})
}

// validUTF8 is b as a string with invalid bytes replaced (JSON strings are
// UTF-8; the encoder would do the same, silently).
func validUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// containerPath is the request's ?path=, which must be absolute.
func containerPath(r *http.Request) (string, error) {
	p := r.URL.Query().Get("path")
	if p == "" || !path.IsAbs(p) {
		return "", badRequest("path %q: want an absolute container path (?path=/...)", p)
	}
	clean := path.Clean(p)
	if clean == "/" {
		return "", badRequest("path: / cannot be copied as a whole; name a file or directory under it")
	}
	return clean, nil
}

// putFiles writes a file (application/octet-stream) or extracts a tar
// (application/x-tar) at ?path=. A tar is checked on the host first, by
// the same rules as downloads (Sandbox.UploadTar): only regular files and
// directories, under the limits. X-Sandbox-Agent-Skipped counts the
// entries left out.
func (s *Server) putFiles(w http.ResponseWriter, r *http.Request, a *agent, _ store.Agent) {
	dst, err := containerPath(r)
	if err != nil {
		writeError(w, err)
		return
	}
	ctype, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	skipped := 0 // entries of a tar left out: links, devices
	switch ctype {
	case "application/x-tar":
		rep, err := a.ag.Container().UploadTar(r.Context(), dst, r.Body)
		if err != nil {
			writeError(w, uploadErr(err))
			return
		}
		skipped = len(rep.Skipped) + rep.SkippedOmitted
	case "application/octet-stream":
		// Through a temporary file, not memory: uploads run side by side.
		if err := uploadFile(r, a.ag.Container(), dst); err != nil {
			writeError(w, err)
			return
		}
	default:
		writeError(w, &apiError{status: http.StatusUnsupportedMediaType, kind: KindInvalidArgument,
			msg: fmt.Sprintf("Content-Type %q: want application/x-tar or application/octet-stream", ctype)})
		return
	}
	w.Header().Set("X-Sandbox-Agent-Skipped", strconv.Itoa(skipped))
	w.WriteHeader(http.StatusNoContent)
}

// uploadFile writes the request's body to the container file dst.
func uploadFile(r *http.Request, sb *sandboxagent.Sandbox, dst string) error {
	f, err := os.CreateTemp("", "sandbox-agent-upload-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err = f.Chmod(0o644); err == nil { // the mode the container file gets
		_, err = io.Copy(f, r.Body)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return uploadErr(err)
	}
	return sb.Upload(r.Context(), f.Name(), dst)
}

func uploadErr(err error) error {
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return &apiError{status: http.StatusRequestEntityTooLarge, kind: KindTooLarge, msg: fmt.Sprintf("request body over %d bytes", mbe.Limit)}
	case errors.Is(err, sandboxagent.ErrLimitExceeded):
		return &apiError{status: http.StatusRequestEntityTooLarge, kind: KindTooLarge, msg: err.Error()}
	case errors.Is(err, sandboxagent.ErrUnsafeArchive):
		return badRequest("tar: %v", err)
	}
	return err
}

// getFiles answers a tar of ?path=. The container's archive is hostile:
// Sandbox.DownloadTar checks it on the host under the download rules and
// packs only what passed, so no symlink, device or outside path planted
// in the sandbox reaches the client.
func (s *Server) getFiles(w http.ResponseWriter, r *http.Request, a *agent, _ store.Agent) {
	src, err := containerPath(r)
	if err != nil {
		writeError(w, err)
		return
	}
	rc, rep, err := a.ag.Container().DownloadTar(r.Context(), src)
	if err != nil {
		writeError(w, err)
		return
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "application/x-tar")
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(src) + ".tar"}))
	w.Header().Set("X-Sandbox-Agent-Skipped", strconv.Itoa(len(rep.Skipped)+rep.SkippedOmitted))
	w.WriteHeader(http.StatusOK)
	if _, err := io.Copy(w, rc); err != nil {
		s.log.Warn("download: pack", "agent", a.id, "path", src, "err", err)
		// The status is sent: break the connection, so the client sees a
		// cut transfer rather than a short archive that looks whole.
		panic(http.ErrAbortHandler)
	}
}
