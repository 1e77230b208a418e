package server

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf8"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/safetar"
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

func (s *Server) exec(w http.ResponseWriter, r *http.Request, a *agent) {
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

// uploadTop is the one top-level name an upload tar is re-rooted under
// while the server checks it.
const uploadTop = "upload"

// putFiles writes a file (application/octet-stream) or extracts a tar
// (application/x-tar) at ?path=. A tar is checked on the host first, by
// the same rules as downloads: only regular files and directories, under
// the limits; then the checked tree is uploaded. X-Sandbox-Agent-Skipped
// counts the entries left out.
func (s *Server) putFiles(w http.ResponseWriter, r *http.Request, a *agent) {
	dst, err := containerPath(r)
	if err != nil {
		writeError(w, err)
		return
	}
	ctype, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	staging, err := os.MkdirTemp("", "sandbox-agent-upload-")
	if err != nil {
		writeError(w, err)
		return
	}
	defer os.RemoveAll(staging)
	var src string
	skipped := 0 // entries of a tar left out: links, devices
	switch ctype {
	case "application/x-tar":
		cfg := a.ag.Container().Config()
		body := reroot(r.Body)
		var rep safetar.Report
		rep, err = safetar.Extract(r.Context(), body, staging, uploadTop, safetar.Limits{
			MaxBytes: cfg.MaxDownloadBytes, MaxEntries: cfg.MaxDownloadEntries, MaxDepth: cfg.MaxDownloadDepth,
		})
		body.Close() // a rejected stream must not leave its rewriter blocked
		if err != nil {
			writeError(w, uploadErr(err))
			return
		}
		skipped = len(rep.Skipped) + rep.SkippedOmitted
		src = filepath.Join(staging, uploadTop)

	case "application/octet-stream":
		src = filepath.Join(staging, "file")
		f, err := os.OpenFile(src, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			writeError(w, err)
			return
		}
		_, err = io.Copy(f, r.Body)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			writeError(w, uploadErr(err))
			return
		}
	default:
		writeError(w, &apiError{status: http.StatusUnsupportedMediaType, kind: KindInvalidArgument,
			msg: fmt.Sprintf("Content-Type %q: want application/x-tar or application/octet-stream", ctype)})
		return
	}
	if err := a.ag.Container().Upload(r.Context(), src, dst); err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("X-Sandbox-Agent-Skipped", strconv.Itoa(skipped))
	w.WriteHeader(http.StatusNoContent)
}

func uploadErr(err error) error {
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return &apiError{status: http.StatusRequestEntityTooLarge, kind: KindTooLarge, msg: fmt.Sprintf("request body over %d bytes", mbe.Limit)}
	case errors.Is(err, safetar.ErrLimit):
		return &apiError{status: http.StatusRequestEntityTooLarge, kind: KindTooLarge, msg: err.Error()}
	case errors.Is(err, safetar.ErrUnsafe), errors.Is(err, safetar.ErrTruncated):
		return badRequest("tar: %v", err)
	}
	return err
}

// reroot rewrites a client's tar stream so that every entry sits under
// uploadTop (safetar.Extract wants one top-level name). Link targets are
// left alone: Extract skips symlinks and checks hardlinks itself.
func reroot(body io.Reader) *io.PipeReader {
	pr, pw := io.Pipe()
	go func() {
		tr := tar.NewReader(body)
		tw := tar.NewWriter(pw)
		// The top directory itself, so that an empty tar makes an empty
		// directory.
		if err := tw.WriteHeader(&tar.Header{Name: uploadTop + "/", Typeflag: tar.TypeDir, Mode: 0o755, Format: tar.FormatPAX}); err != nil {
			pw.CloseWithError(err)
			return
		}
		for {
			hdr, err := tr.Next()
			if err == io.EOF {
				pw.CloseWithError(tw.Close())
				return
			}
			if err != nil {
				pw.CloseWithError(err)
				return
			}
			name := strings.TrimPrefix(hdr.Name, "./")
			if name == "" || name == "." {
				continue // the archive's own root
			}
			if strings.HasPrefix(name, "/") {
				// Absolute names stay absolute: Extract refuses them.
				hdr.Name = name
			} else {
				hdr.Name = uploadTop + "/" + name
			}
			if hdr.Typeflag == tar.TypeLink && !strings.HasPrefix(hdr.Linkname, "/") {
				hdr.Linkname = uploadTop + "/" + strings.TrimPrefix(hdr.Linkname, "./")
			}
			hdr.Format = tar.FormatPAX // long names after the prefix
			if err := tw.WriteHeader(hdr); err != nil {
				pw.CloseWithError(err)
				return
			}
			if _, err := io.Copy(tw, tr); err != nil {
				pw.CloseWithError(err)
				return
			}
		}
	}()
	return pr
}

// getFiles answers a tar of ?path=. The container's archive is hostile:
// it goes through Download (extracted on the host under the download
// rules) and only what passed is packed again for the client, so no
// symlink, device or outside path planted in the sandbox reaches it.
func (s *Server) getFiles(w http.ResponseWriter, r *http.Request, a *agent) {
	src, err := containerPath(r)
	if err != nil {
		writeError(w, err)
		return
	}
	staging, err := os.MkdirTemp("", "sandbox-agent-download-")
	if err != nil {
		writeError(w, err)
		return
	}
	defer os.RemoveAll(staging)
	rep, err := a.ag.Container().Download(r.Context(), src, staging)
	if err != nil {
		writeError(w, err)
		return
	}
	base := path.Base(src)
	w.Header().Set("Content-Type", "application/x-tar")
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": base + ".tar"}))
	w.Header().Set("X-Sandbox-Agent-Skipped", strconv.Itoa(len(rep.Skipped)+rep.SkippedOmitted))
	w.WriteHeader(http.StatusOK)
	// The staged tree holds only regular files and directories.
	if err := safetar.Pack(r.Context(), w, rep.Path, base, safetar.Owner{}); err != nil {
		s.log.Warn("download: pack", "agent", a.id, "path", src, "err", err)
		// The status is sent: break the connection, so the client sees a
		// cut transfer rather than a short archive that looks whole.
		panic(http.ErrAbortHandler)
	}
}
