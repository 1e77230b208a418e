package drivertest

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"testing"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
)

// update makes CheckGolden rewrite the golden files instead of comparing.
var update = flag.Bool("update", false, "rewrite the parser's golden files in testdata/golden")

// Golden is what a parser makes of one whole turn's output; a golden file
// holds it as indented JSON.
type Golden struct {
	Events    []GoldenEvent `json:"events"`
	Reply     string        `json:"reply"`
	SessionID string        `json:"session_id"`
	Error     *GoldenError  `json:"error"`
}

// GoldenEvent is an event with the raw line it came from.
type GoldenEvent struct {
	Line      int                    `json:"line"`
	Kind      sandboxagent.EventKind `json:"kind"`
	SessionID string                 `json:"session_id,omitempty"`
	Payload   sandboxagent.Payload   `json:"payload"`
}

// GoldenError is the DriverError Finish returned.
type GoldenError struct {
	Message  string `json:"message"`
	ExitCode int    `json:"exit_code"`
	Status   int    `json:"status"`
	Stderr   string `json:"stderr"`
	// Driver is checked by CheckGolden, not kept in the file.
	Driver string `json:"-"`
}

// ParserCase is one captured turn. Every driver keeps its captures in the
// same layout, under the package's testdata folder:
//
//	testdata/<Name>.jsonl         the CLI's stdout, as the agent reads it
//	testdata/<Name>.stderr        its stderr (optional)
//	testdata/golden/<Name>.json   what the parser makes of the two
type ParserCase struct {
	Name string
	// Exit is the CLI's exit code.
	Exit int
	// Resume is the session the turn continued ("" for a new one).
	Resume string
	// Stdout, when set, replaces testdata/<Name>.jsonl (a driver that
	// assembles the output from several captured files).
	Stdout []byte
}

// Parsing is a driver's side the parser tests need (a Driver has it).
type Parsing interface {
	Name() string
	NewParser(sandboxagent.Turn) sandboxagent.Parser
}

// Testdata reads testdata/name, failing the test when it cannot.
func Testdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Parse feeds stdout to p line by line, as the agent does (lines numbered
// from 1), and finishes with exit and stderr. A Finish error that is not
// a *DriverError fails the test.
func Parse(t testing.TB, p sandboxagent.Parser, stdout []byte, exit int, stderr []byte) Golden {
	t.Helper()
	var g Golden
	lines := bytes.Split(stdout, []byte("\n"))
	if n := len(lines); n > 0 && len(lines[n-1]) == 0 {
		lines = lines[:n-1]
	}
	for i, l := range lines {
		for _, ev := range p.Parse(l) {
			g.Events = append(g.Events, GoldenEvent{Line: i + 1, Kind: ev.Kind, SessionID: ev.SessionID, Payload: ev.Payload})
		}
	}
	out, err := p.Finish(exit, stderr)
	g.Reply, g.SessionID = out.Reply, out.SessionID
	if err != nil {
		var de *sandboxagent.DriverError
		if !errors.As(err, &de) {
			t.Fatalf("Finish error %T %v, want a *DriverError", err, err)
		}
		g.Error = &GoldenError{Message: de.Message, ExitCode: de.ExitCode, Status: de.Status, Stderr: de.Stderr, Driver: de.Driver}
	}
	return g
}

// ParseFile runs a fresh parser of d over testdata/file (the stdout) with
// exit and stderr.
func ParseFile(t testing.TB, d Parsing, file string, exit int, stderr []byte) Golden {
	t.Helper()
	return Parse(t, d.NewParser(sandboxagent.Turn{Prompt: "p"}), Testdata(t, file), exit, stderr)
}

// ParseCase runs a fresh parser of d over c's capture.
func ParseCase(t testing.TB, d Parsing, c ParserCase) Golden {
	t.Helper()
	stdout := c.Stdout
	if stdout == nil {
		stdout = Testdata(t, c.Name+".jsonl")
	}
	stderr, err := os.ReadFile(filepath.Join("testdata", c.Name+".stderr"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return Parse(t, d.NewParser(sandboxagent.Turn{Prompt: "p", SessionID: c.Resume}), stdout, c.Exit, stderr)
}

// CheckGolden compares what d's parser makes of every case with the
// case's golden file, or rewrites the golden files when the test runs
// with -update (go test -run TestParserGolden -update; review the diff!).
// It also checks that every DriverError names the driver.
func CheckGolden(t *testing.T, d Parsing, cases []ParserCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			g := ParseCase(t, d, c)
			if g.Error != nil && g.Error.Driver != d.Name() {
				t.Errorf("DriverError.Driver %q, want %q", g.Error.Driver, d.Name())
			}
			got, err := json.MarshalIndent(g, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			name := filepath.Join("testdata", "golden", c.Name+".json")
			if *update {
				if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(name, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(name)
			if err != nil {
				t.Fatalf("%v (run go test -run %s -update to create it)", err, t.Name())
			}
			if !bytes.Equal(got, want) {
				t.Errorf("the parser's output differs from %s (go test -update rewrites it; review the diff):\n%s", name, got)
			}
		})
	}
}
