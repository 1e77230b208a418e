package fakemodel

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strings"
)

// toolDef is one tool offered by the CLI, normalised from the three shapes:
// Anthropic {name, input_schema}, chat {type:function, function:{name,
// parameters}} and Responses {type:function, name, parameters}.
type toolDef struct {
	Name        string
	Description string
	Type        string // "function", "custom", "bash_20250124", …; "" for Anthropic custom tools
	Schema      *schema
}

type schema struct {
	Properties map[string]*propSchema `json:"properties"`
	Required   []string               `json:"required"`
}

type propSchema struct {
	Type    json.RawMessage   `json:"type"` // a string or a list of strings
	Enum    []json.RawMessage `json:"enum"`
	Const   json.RawMessage   `json:"const"`
	Default json.RawMessage   `json:"default"`
	Items   *propSchema       `json:"items"`
	Minimum *float64          `json:"minimum"`
	Maximum *float64          `json:"maximum"`
}

// types returns the JSON types the property accepts, "null" excluded.
func (p *propSchema) types() []string {
	if p == nil || len(p.Type) == 0 {
		return nil
	}
	var one string
	if json.Unmarshal(p.Type, &one) == nil {
		return []string{one}
	}
	var many []string
	_ = json.Unmarshal(p.Type, &many)
	return slices.DeleteFunc(many, func(s string) bool { return s == "null" })
}

func (p *propSchema) is(t string) bool { return slices.Contains(p.types(), t) }

// parseTools normalises a request's tools array. Entries it cannot read are
// skipped.
func parseTools(raw json.RawMessage) []toolDef {
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		return nil
	}
	var out []toolDef
	for _, it := range items {
		var t struct {
			Type        string          `json:"type"`
			Name        string          `json:"name"`
			Description string          `json:"description"`
			InputSchema json.RawMessage `json:"input_schema"`
			Parameters  json.RawMessage `json:"parameters"`
			Function    *struct {
				Name        string          `json:"name"`
				Description string          `json:"description"`
				Parameters  json.RawMessage `json:"parameters"`
			} `json:"function"`
		}
		if json.Unmarshal(it, &t) != nil {
			continue
		}
		d := toolDef{Name: t.Name, Description: t.Description, Type: t.Type}
		params := t.InputSchema
		if params == nil {
			params = t.Parameters
		}
		if t.Function != nil {
			d.Name, d.Description, params = t.Function.Name, t.Function.Description, t.Function.Parameters
		}
		if len(params) > 0 && !bytes.Equal(params, []byte("null")) {
			var s schema
			if json.Unmarshal(params, &s) == nil {
				d.Schema = &s
			}
		}
		if d.Name != "" {
			out = append(out, d)
		}
	}
	return out
}

// callable reports whether the model can call the tool with JSON arguments.
func (t toolDef) callable() bool { return t.Type != "custom" && t.Type != "namespace" }

func (t toolDef) prop(name string) *propSchema {
	if t.Schema == nil {
		return nil
	}
	return t.Schema.Properties[name]
}

// Known tool names, best first, compared case-insensitively.
var (
	shellNames = []string{"bash", "shell", "exec_command", "run_shell_command", "shell_command",
		"execute_command", "run_command", "run_terminal_cmd", "terminal", "execute_bash", "bash_run", "exec"}
	writeNames = []string{"write", "write_file", "create_file", "writefile", "file_write", "write_to_file", "createfile"}

	commandKeys = []string{"command", "cmd", "script", "commandLine", "command_line"}
	pathKeys    = []string{"file_path", "filePath", "path", "filename", "file", "target_file", "absolute_path"}
	contentKeys = []string{"content", "contents", "file_text", "text", "data"}
)

// stringKey returns the first key that the tool declares as a free string
// (not an enum).
func (t toolDef) stringKey(keys []string) string {
	for _, k := range keys {
		if p := t.prop(k); p != nil && len(p.Enum) == 0 && (p.is("string") || len(p.types()) == 0) {
			return k
		}
	}
	return ""
}

// commandKey returns the parameter that carries a shell command and whether
// it takes an argv array rather than a string.
func (t toolDef) commandKey() (key string, argv bool) {
	if t.Schema == nil {
		// Anthropic's schema-less server tool (type bash_2025…) takes "command".
		if strings.HasPrefix(t.Type, "bash_") {
			return "command", false
		}
		return "", false
	}
	if k := t.stringKey(commandKeys); k != "" {
		return k, false
	}
	for _, k := range commandKeys {
		if p := t.prop(k); p != nil && p.is("array") {
			return k, true
		}
	}
	return "", false
}

func nameRank(name string, known []string) int {
	for i, n := range known {
		if strings.EqualFold(name, n) {
			return i
		}
	}
	return -1
}

// findShell picks the CLI's shell tool: a known name first, then a name
// that looks like one, then a tool whose description says it runs shell
// commands and that requires a command parameter. Tools whose command
// parameter is an enum (str_replace_editor) never qualify.
func findShell(tools []toolDef) (toolDef, bool) {
	best, bestRank := toolDef{}, -1
	for _, t := range tools {
		if !t.callable() {
			continue
		}
		key, _ := t.commandKey()
		if key == "" {
			continue
		}
		rank := nameRank(t.Name, shellNames)
		if rank < 0 {
			lower := strings.ToLower(t.Name)
			desc := strings.ToLower(t.Description)
			switch {
			case containsAny(lower, "bash", "shell", "terminal", "exec"):
				rank = 100
			case t.Schema != nil && slices.Contains(t.Schema.Required, key) && containsAny(desc, "shell", "bash", "terminal"):
				rank = 200
			default:
				continue
			}
		}
		if bestRank < 0 || rank < bestRank {
			best, bestRank = t, rank
		}
	}
	return best, bestRank >= 0
}

// findWrite picks the CLI's file-write tool: it must declare a path and a
// content parameter and be named like a write tool.
func findWrite(tools []toolDef) (toolDef, bool) {
	best, bestRank := toolDef{}, -1
	for _, t := range tools {
		if !t.callable() || t.stringKey(pathKeys) == "" || t.stringKey(contentKeys) == "" {
			continue
		}
		rank := nameRank(t.Name, writeNames)
		if rank < 0 {
			lower := strings.ToLower(t.Name)
			if !containsAny(lower, "write", "create") || containsAny(lower, "edit", "replace", "patch") {
				continue
			}
			rank = 100
		}
		if bestRank < 0 || rank < bestRank {
			best, bestRank = t, rank
		}
	}
	return best, bestRank >= 0
}

func containsAny(s string, subs ...string) bool {
	for _, x := range subs {
		if strings.Contains(s, x) {
			return true
		}
	}
	return false
}

// toolCall is a call the fake emits: the tool name and its JSON arguments.
type toolCall struct {
	Name      string
	Arguments string // a JSON object
}

// planCall builds the tool call for a tool step from the offered tools.
func planCall(st Step, tools []toolDef) (toolCall, error) {
	shell, haveShell := findShell(tools)
	switch st.Tool {
	case ToolShell:
		if !haveShell {
			return toolCall{}, fmt.Errorf("no shell tool among the offered tools %s", toolNames(tools))
		}
		return shellCall(shell, st.Command, "Run the scripted shell command")
	case ToolWrite:
		if w, ok := findWrite(tools); ok {
			args := map[string]any{
				w.stringKey(pathKeys):    st.Path,
				w.stringKey(contentKeys): st.Content,
			}
			fillRequired(w, args, "Write "+st.Path)
			return marshalCall(w.Name, args)
		}
		if !haveShell {
			return toolCall{}, fmt.Errorf("no write or shell tool among the offered tools %s", toolNames(tools))
		}
		return shellCall(shell, writeCommand(st.Path, st.Content), "Write "+st.Path)
	}
	return toolCall{}, fmt.Errorf("step has no tool")
}

func shellCall(t toolDef, command, description string) (toolCall, error) {
	key, argv := t.commandKey()
	args := map[string]any{}
	if argv {
		args[key] = []string{"bash", "-lc", command}
	} else {
		args[key] = command
	}
	// Claude's Bash shows "description" to the user; fill it when declared.
	if p := t.prop("description"); p != nil && key != "description" {
		args["description"] = description
	}
	fillRequired(t, args, description)
	return marshalCall(t.Name, args)
}

// writeCommand is a shell command that writes content to p byte-exactly,
// creating the parent directory. base64 keeps every byte intact whatever
// the quoting rules of the shell.
func writeCommand(p, content string) string {
	enc := base64.StdEncoding.EncodeToString([]byte(content))
	cmd := fmt.Sprintf("printf '%%s' '%s' | base64 -d > %s", enc, shellQuote(p))
	if dir := path.Dir(p); dir != "." && dir != "/" {
		cmd = "mkdir -p -- " + shellQuote(dir) + " && " + cmd
	}
	return cmd
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// fillRequired gives every required parameter not yet set a plausible value
// from its schema.
func fillRequired(t toolDef, args map[string]any, description string) {
	if t.Schema == nil {
		return
	}
	for _, name := range t.Schema.Required {
		if _, ok := args[name]; ok {
			continue
		}
		args[name] = fillValue(name, t.Schema.Properties[name], description)
	}
}

func fillValue(name string, p *propSchema, description string) any {
	if p == nil {
		return description
	}
	for _, raw := range []json.RawMessage{p.Default, p.Const} {
		if len(raw) > 0 {
			return raw
		}
	}
	if len(p.Enum) > 0 {
		return p.Enum[0]
	}
	lower := strings.ToLower(name)
	types := p.types()
	typ := "string"
	if len(types) > 0 {
		typ = types[0]
	}
	switch typ {
	case "number", "integer":
		v := 1.0
		if strings.Contains(lower, "timeout") {
			v = 120
			if strings.HasSuffix(lower, "ms") {
				v = 120000
			}
		}
		if p.Minimum != nil && v < *p.Minimum {
			v = *p.Minimum
		}
		if p.Maximum != nil && v > *p.Maximum {
			v = *p.Maximum
		}
		return v
	case "boolean":
		return false
	case "array":
		return []any{}
	case "object":
		return map[string]any{}
	case "null":
		return nil
	}
	if strings.Contains(lower, "dir") {
		return "."
	}
	return description
}

func marshalCall(name string, args map[string]any) (toolCall, error) {
	b, err := marshalJSON(args)
	if err != nil {
		return toolCall{}, err
	}
	return toolCall{Name: name, Arguments: string(b)}, nil
}

// marshalJSON encodes without HTML escaping and without a trailing newline.
func marshalJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

func toolNames(tools []toolDef) string {
	names := make([]string, len(tools))
	for i, t := range tools {
		names[i] = t.Name
	}
	return "[" + strings.Join(names, ", ") + "]"
}
