package images

import (
	"archive/tar"
	"bytes"
	"encoding/pem"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
)

// CAPath is where the CA bundle sits in the build context. It is always
// present (empty without a CA) so the Dockerfiles can COPY it
// unconditionally.
const CAPath = "ca/ca.crt"

// maxCABytes caps the CA bundle read into the build context.
const maxCABytes = 8 << 20

// contextTime is the fixed modification time of every context entry: the
// same inputs give a byte-identical context (and engine cache hits).
var contextTime = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// BuildContext assembles the build context shared by every image: the
// contents of files' docker/ directory at the root (Dockerfile.base,
// Dockerfile.<cli>, helper scripts) and ca/ca.crt holding caPEM (possibly
// empty). Entries are owned by root, 0644 (directories 0755; scripts are
// run with sh, not executed), with a fixed time, in lexical order.
func BuildContext(files fs.FS, caPEM []byte) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := func(name string, mode int64, size int64, typ byte) *tar.Header {
		return &tar.Header{
			Typeflag: typ, Name: name, Mode: mode, Size: size,
			ModTime: contextTime, Uname: "root", Gname: "root", Format: tar.FormatPAX,
		}
	}
	err := fs.WalkDir(files, "docker", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(p, "docker"), "/")
		if rel == "" {
			return nil
		}
		if d.IsDir() {
			return tw.WriteHeader(hdr(rel+"/", 0o755, 0, tar.TypeDir))
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("image files: %s is not a regular file", p)
		}
		data, err := fs.ReadFile(files, p)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(hdr(rel, 0o644, int64(len(data)), tar.TypeReg)); err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("build context: %w", err)
	}
	if err := tw.WriteHeader(hdr(path.Dir(CAPath)+"/", 0o755, 0, tar.TypeDir)); err != nil {
		return nil, err
	}
	if err := tw.WriteHeader(hdr(CAPath, 0o644, int64(len(caPEM)), tar.TypeReg)); err != nil {
		return nil, err
	}
	if _, err := tw.Write(caPEM); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// ReadCA reads a PEM CA bundle for the build context. It must hold at least
// one certificate and stay under 8 MiB.
func ReadCA(file string) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("CA bundle: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxCABytes+1))
	if err != nil {
		return nil, fmt.Errorf("CA bundle %s: %w", file, err)
	}
	if len(data) > maxCABytes {
		return nil, fmt.Errorf("%w: CA bundle %s is larger than %d bytes", sandboxagent.ErrInvalidArgument, file, maxCABytes)
	}
	rest := data
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, fmt.Errorf("%w: CA bundle %s holds no PEM certificate", sandboxagent.ErrInvalidArgument, file)
		}
		if block.Type == "CERTIFICATE" {
			return data, nil
		}
	}
}
