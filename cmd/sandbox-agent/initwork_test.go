package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sandbox-agent/sandbox-agent/internal/prereq"
)

// Every command runs the init of every package the binary links, so a
// regexp compiled in a package-level var costs each start, `version`
// included (issue 31). Ours are compiled at first use (internal/lazyre);
// these packages still compile theirs at init (small patterns, to move
// next). The list must shrink, never grow.
var regexpAtInitAllowed = []string{}

func TestNoRegexpCompiledAtInit(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}\t{{.Dir}}\t{{join .GoFiles \",\"}}", ".").Output()
	if err != nil {
		prereq.Missing(t, "go list: %v", err) // no go tool next to the test binary
	}
	const module = "github.com/sandbox-agent/sandbox-agent"
	var found []string
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 3 || (f[0] != module && !strings.HasPrefix(f[0], module+"/")) || f[2] == "" {
			continue
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(f[0], module), "/")
		for name := range strings.SplitSeq(f[2], ",") {
			for _, v := range regexpsAtInit(t, filepath.Join(f[1], name)) {
				if !slices.Contains(regexpAtInitAllowed, rel) {
					t.Errorf("%s/%s: var %s compiles a regexp at init: use internal/lazyre.New", rel, name, v)
				}
				if !slices.Contains(found, rel) {
					found = append(found, rel)
				}
			}
		}
	}
	for _, p := range regexpAtInitAllowed {
		if !slices.Contains(found, p) {
			t.Errorf("%s no longer compiles a regexp at init: remove it from regexpAtInitAllowed", p)
		}
	}
}

// regexpsAtInit names the package-level vars of file whose initializer calls
// regexp.MustCompile or regexp.Compile outside a function literal.
func regexpsAtInit(t *testing.T, file string) []string {
	t.Helper()
	af, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range af.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.VAR {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for _, val := range vs.Values {
				compiles := false
				ast.Inspect(val, func(n ast.Node) bool {
					switch n := n.(type) {
					case *ast.FuncLit:
						return false // runs when called, not at init
					case *ast.SelectorExpr:
						if x, ok := n.X.(*ast.Ident); ok && x.Name == "regexp" && (n.Sel.Name == "MustCompile" || n.Sel.Name == "Compile") {
							compiles = true
						}
					}
					return true
				})
				if compiles {
					names = append(names, vs.Names[0].Name)
				}
			}
		}
	}
	return names
}
