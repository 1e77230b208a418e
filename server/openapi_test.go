package server

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite docs/api-http.md from openapi.json")

// apiDocPath is the generated reference, relative to this package.
const apiDocPath = "../docs/api-http.md"

// httpMethods are the operation keys of a path item, in the order the
// reference lists them.
var httpMethods = []string{"get", "put", "post", "delete", "patch", "head", "options", "trace"}

// omap is a JSON object that keeps its keys' order, so the reference
// follows the document.
type omap struct {
	keys []string
	m    map[string]any
}

func (o *omap) get(k string) any {
	if o == nil {
		return nil
	}
	return o.m[k]
}

// ks returns the keys in document order (none for a nil object).
func (o *omap) ks() []string {
	if o == nil {
		return nil
	}
	return o.keys
}

func (o *omap) obj(k string) *omap {
	v, _ := o.get(k).(*omap)
	return v
}

func (o *omap) str(k string) string {
	v, _ := o.get(k).(string)
	return v
}

func (o *omap) arr(k string) []any {
	v, _ := o.get(k).([]any)
	return v
}

// decodeOrdered reads one JSON value: objects become *omap, arrays []any,
// numbers json.Number.
func decodeOrdered(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return tok, nil
	}
	switch d {
	case '{':
		o := &omap{m: map[string]any{}}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return nil, err
			}
			k := kt.(string)
			if _, dup := o.m[k]; dup {
				return nil, fmt.Errorf("duplicate key %q", k)
			}
			v, err := decodeOrdered(dec)
			if err != nil {
				return nil, err
			}
			o.keys = append(o.keys, k)
			o.m[k] = v
		}
		_, err := dec.Token()
		return o, err
	case '[':
		a := []any{}
		for dec.More() {
			v, err := decodeOrdered(dec)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		_, err := dec.Token()
		return a, err
	}
	return nil, fmt.Errorf("unexpected %v", d)
}

func parseOpenAPI(t *testing.T) *omap {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(openAPIJSON))
	dec.UseNumber()
	v, err := decodeOrdered(dec)
	if err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	if _, err := dec.Token(); err == nil {
		t.Fatal("openapi.json: data after the document")
	}
	doc, ok := v.(*omap)
	if !ok {
		t.Fatal("openapi.json: not an object")
	}
	return doc
}

// resolve follows a local JSON pointer ("#/components/schemas/Agent").
func resolve(doc *omap, ref string) (any, error) {
	if !strings.HasPrefix(ref, "#/") {
		return nil, fmt.Errorf("%s: only local references are allowed", ref)
	}
	var cur any = doc
	for _, part := range strings.Split(ref[2:], "/") {
		part = strings.NewReplacer("~1", "/", "~0", "~").Replace(part)
		switch c := cur.(type) {
		case *omap:
			v, ok := c.m[part]
			if !ok {
				return nil, fmt.Errorf("%s: no %q", ref, part)
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(part)
			if err != nil || i < 0 || i >= len(c) {
				return nil, fmt.Errorf("%s: bad index %q", ref, part)
			}
			cur = c[i]
		default:
			return nil, fmt.Errorf("%s: %q is not in a container", ref, part)
		}
	}
	return cur, nil
}

// deref returns o, or what its $ref points to.
func deref(doc, o *omap) *omap {
	for i := 0; o != nil && i < 10; i++ {
		ref := o.str("$ref")
		if ref == "" {
			return o
		}
		v, err := resolve(doc, ref)
		if err != nil {
			return nil
		}
		o, _ = v.(*omap)
	}
	return o
}

// walk calls fn for every object in v, with its JSON path.
func walk(v any, path string, fn func(path string, o *omap)) {
	switch c := v.(type) {
	case *omap:
		fn(path, c)
		for _, k := range c.ks() {
			walk(c.m[k], path+"/"+k, fn)
		}
	case []any:
		for i, e := range c {
			walk(e, path+"/"+strconv.Itoa(i), fn)
		}
	}
}

type operation struct {
	method, path string
	item, op     *omap
}

// operations lists the document's operations in document order.
func operations(doc *omap) []operation {
	var out []operation
	paths := doc.obj("paths")
	for _, p := range paths.ks() {
		item := paths.obj(p)
		for _, m := range httpMethods {
			if op := item.obj(m); op != nil {
				out = append(out, operation{method: strings.ToUpper(m), path: p, item: item, op: op})
			}
		}
	}
	return out
}

// parameters are the path item's and the operation's, resolved; the
// operation's override the item's of the same name and place.
func (o operation) parameters(doc *omap) []*omap {
	var out []*omap
	idx := map[string]int{}
	for _, list := range [][]any{o.item.arr("parameters"), o.op.arr("parameters")} {
		for _, v := range list {
			p, _ := v.(*omap)
			p = deref(doc, p)
			if p == nil {
				continue
			}
			key := p.str("in") + ":" + p.str("name")
			if i, ok := idx[key]; ok {
				out[i] = p
				continue
			}
			idx[key] = len(out)
			out = append(out, p)
		}
	}
	return out
}

var pathParamRE = regexp.MustCompile(`\{([^}]+)\}`)

func TestOpenAPIValid(t *testing.T) {
	doc := parseOpenAPI(t)
	if v := doc.str("openapi"); !strings.HasPrefix(v, "3.1.") {
		t.Errorf("openapi = %q, want 3.1.x", v)
	}
	if v := doc.obj("info").str("version"); v != "1" {
		t.Errorf("info.version = %q, want 1", v)
	}
	if doc.obj("info").str("title") == "" {
		t.Error("info.title is empty")
	}

	// Formatting: indented with 2 spaces, as json.Indent writes it.
	var compact, indented bytes.Buffer
	if err := json.Compact(&compact, openAPIJSON); err != nil {
		t.Fatal(err)
	}
	if err := json.Indent(&indented, compact.Bytes(), "", "  "); err != nil {
		t.Fatal(err)
	}
	indented.WriteByte('\n')
	if !bytes.Equal(indented.Bytes(), openAPIJSON) {
		t.Error("openapi.json is not indented with 2 spaces (json.Indent form, final newline)")
	}

	// Every $ref resolves.
	walk(doc, "#", func(path string, o *omap) {
		ref, ok := o.get("$ref").(string)
		if !ok {
			return
		}
		if _, err := resolve(doc, ref); err != nil {
			t.Errorf("%s: $ref: %v", path, err)
		}
	})

	// Security: the schemes named exist.
	schemes := doc.obj("components").obj("securitySchemes")
	if schemes.obj("bearer").str("scheme") != "bearer" || schemes.obj("bearer").str("type") != "http" {
		t.Error("securitySchemes.bearer is not http bearer")
	}
	if c := schemes.obj("cookie"); c.str("type") != "apiKey" || c.str("in") != "cookie" || c.str("name") != sessionCookie {
		t.Errorf("securitySchemes.cookie is not an apiKey cookie %s", sessionCookie)
	}
	checkSecurity := func(where string, list []any) {
		for _, v := range list {
			req, _ := v.(*omap)
			for _, name := range req.ks() {
				if schemes.obj(name) == nil {
					t.Errorf("%s: security names unknown scheme %q", where, name)
				}
			}
		}
	}
	if len(doc.arr("security")) == 0 {
		t.Error("no global security")
	}
	checkSecurity("security", doc.arr("security"))

	// Operations.
	ops := operations(doc)
	if len(ops) == 0 {
		t.Fatal("no operations")
	}
	ids := map[string]string{}
	for _, o := range ops {
		where := o.method + " " + o.path
		id := o.op.str("operationId")
		if id == "" {
			t.Errorf("%s: no operationId", where)
		} else if prev, dup := ids[id]; dup {
			t.Errorf("%s: operationId %q already used by %s", where, id, prev)
		} else {
			ids[id] = where
		}
		if o.op.str("summary") == "" {
			t.Errorf("%s: no summary", where)
		}
		resps := o.op.obj("responses")
		if resps == nil || len(resps.ks()) == 0 {
			t.Errorf("%s: no responses", where)
		}
		for _, code := range resps.ks() {
			if n, err := strconv.Atoi(code); err != nil || n < 100 || n > 599 {
				t.Errorf("%s: response %q is not a status", where, code)
			}
			if r := deref(doc, resps.obj(code)); r == nil || r.str("description") == "" {
				t.Errorf("%s: response %s has no description", where, code)
			}
		}
		if sec, ok := o.op.get("security").([]any); ok {
			checkSecurity(where, sec)
		}
		// Path parameters: those of the template, declared, and only those.
		want := map[string]bool{}
		for _, m := range pathParamRE.FindAllStringSubmatch(o.path, -1) {
			want[m[1]] = true
		}
		got := map[string]bool{}
		for _, p := range o.parameters(doc) {
			if p.str("name") == "" || p.str("in") == "" {
				t.Errorf("%s: a parameter without name or in", where)
			}
			if p.obj("schema") == nil {
				t.Errorf("%s: parameter %s has no schema", where, p.str("name"))
			}
			if p.str("in") != "path" {
				continue
			}
			got[p.str("name")] = true
			if p.get("required") != true {
				t.Errorf("%s: path parameter %s is not required", where, p.str("name"))
			}
		}
		for n := range want {
			if !got[n] {
				t.Errorf("%s: path parameter {%s} not declared", where, n)
			}
		}
		for n := range got {
			if !want[n] {
				t.Errorf("%s: parameter %s is not in the path", where, n)
			}
		}
	}

	// Schemas: the ones clients use exist; required fields are properties.
	schemas := doc.obj("components").obj("schemas")
	for _, name := range []string{"CreateAgentRequest", "Agent", "AgentList", "TurnRequest", "TurnResult",
		"Event", "Payload", "ExecRequest", "ExecResult", "SessionList", "SessionInfo", "SessionDump",
		"SessionRef", "Error", "Health", "Checkpoint", "CheckpointList", "ForkResult"} {
		if schemas.obj(name) == nil {
			t.Errorf("components.schemas.%s is missing", name)
		}
	}
	for _, name := range schemas.ks() {
		s := schemas.obj(name)
		if s.str("description") == "" {
			t.Errorf("schema %s has no description", name)
		}
		props := s.obj("properties")
		for _, r := range s.arr("required") {
			if props.get(r.(string)) == nil {
				t.Errorf("schema %s: required %q is not a property", name, r)
			}
		}
	}

	// The error kinds are the server's.
	var kinds []string
	for _, k := range schemas.obj("Error").obj("properties").obj("kind").arr("enum") {
		kinds = append(kinds, k.(string))
	}
	for _, k := range []string{KindInvalidArgument, KindUnauthorized, KindNotFound, KindBusy, KindTooLarge,
		KindDriverError, KindLimit, KindUnsupported, KindEngineUnavailable, KindTimeout, KindInterrupted, KindInternal,
		KindCheckpointTooLarge, KindConflict} {
		if !slices.Contains(kinds, k) {
			t.Errorf("Error.kind enum lacks %q", k)
		}
	}
}

func TestOpenAPICopy(t *testing.T) {
	b := OpenAPI()
	if !bytes.Equal(b, openAPIJSON) {
		t.Fatal("OpenAPI() differs from the embedded document")
	}
	b[0] = 'x'
	if openAPIJSON[0] == 'x' {
		t.Fatal("OpenAPI() returned the embedded slice, not a copy")
	}
}

// normalisePattern turns a ServeMux pattern into the document's form:
// "{x...}" is "{x}" and "/{$}" is "/".
func normalisePattern(p string) string {
	p = strings.ReplaceAll(p, "{$}", "")
	return regexp.MustCompile(`\{([^}.]+)\.\.\.\}`).ReplaceAllString(p, "{$1}")
}

func TestOpenAPIMatchesRoutes(t *testing.T) {
	doc := parseOpenAPI(t)
	inDoc := map[string]bool{}
	for _, o := range operations(doc) {
		inDoc[o.method+" "+o.path] = true
	}
	inServer := map[string]bool{}
	for _, p := range routePatterns() {
		n := normalisePattern(p)
		if inServer[n] {
			t.Errorf("route %q appears twice", p)
		}
		inServer[n] = true
	}
	var missing, extra []string
	for r := range inServer {
		if !inDoc[r] {
			missing = append(missing, r)
		}
	}
	for r := range inDoc {
		if !inServer[r] {
			extra = append(extra, r)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	for _, r := range missing {
		t.Errorf("route %q is not in openapi.json", r)
	}
	for _, r := range extra {
		t.Errorf("openapi.json has %q, which the server does not route", r)
	}
}

func TestAPIDocMatchesOpenAPI(t *testing.T) {
	got := renderAPIDoc(parseOpenAPI(t))
	if *update {
		if err := os.WriteFile(apiDocPath, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(apiDocPath)
	if err != nil {
		t.Fatalf("%v (generate it: go test ./server -run TestAPIDoc -update)", err)
	}
	if string(want) != got {
		gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
		line := 0
		for line < len(gl) && line < len(wl) && gl[line] == wl[line] {
			line++
		}
		at := func(l []string) string {
			if line < len(l) {
				return l[line]
			}
			return "(end of file)"
		}
		t.Fatalf("docs/api-http.md is stale (first difference at line %d:\n  file:      %s\n  generated: %s)\nregenerate: go test ./server -run TestAPIDoc -update",
			line+1, at(wl), at(gl))
	}
}

// apiDocPreamble heads docs/api-http.md; the rest is rendered from
// openapi.json.
const apiDocPreamble = "# HTTP API (`sandbox-agent serve`)\n" +
	"\n" +
	"<!-- Generated from server/openapi.json by `go test ./server -run TestAPIDoc -update`. Do not edit. -->\n" +
	"\n" +
	"`sandbox-agent serve` runs agents behind an HTTP API, for clients in any language, and serves\n" +
	"a live web inspector at `/`. The machine-readable contract is the OpenAPI 3.1 document,\n" +
	"served at `GET /v1/openapi.json` (source: [server/openapi.json](../server/openapi.json));\n" +
	"this page is generated from it.\n" +
	"\n" +
	"## Starting the server\n" +
	"\n" +
	"```sh\n" +
	"sandbox-agent serve                                   # listens on 127.0.0.1:7860\n" +
	"sandbox-agent serve --listen 127.0.0.1:0 --ready-file /tmp/addr   # a free port; host:port written to /tmp/addr\n" +
	"sandbox-agent serve --token-file ./token             # token read from ./token (created if missing)\n" +
	"```\n" +
	"\n" +
	"serve prints `listening on http://ADDR` on stderr once it listens. The token is read from\n" +
	"`--token-file` (default `~/.config/sandbox-agent/serve-token`), trimmed; when the file does not\n" +
	"exist a random token is generated and written there with mode 0600.\n" +
	"\n" +
	"## Authentication\n" +
	"\n" +
	"Every route needs `Authorization: Bearer TOKEN`, or, for the inspector's own pages, the\n" +
	"cookie `sandbox_agent_session` of an inspector session. `POST /login` (form field `token`,\n" +
	"redirecting 303 to `/`) opens one: the cookie holds a random id, never the token, lasts\n" +
	"12 hours, and is HttpOnly and SameSite=Strict; browsers need it because an `EventSource`\n" +
	"cannot send headers. A request riding the cookie must come from the inspector's origin\n" +
	"(`Origin` or `Sec-Fetch-Site`; other ports of the same host count as other origins).\n" +
	"`GET /` without credentials answers 401 with a small HTML login form. A missing, wrong,\n" +
	"expired or revoked token on `/v1/*` answers 401 with a JSON error.\n" +
	"\n" +
	"## Tenants and tokens\n" +
	"\n" +
	"The token of `--token-file` is the admin's: every right over every tenant's agents. Tenants\n" +
	"get tokens of their own from `sandbox-agent serve token create --tenant NAME [--scope SCOPE]...\n" +
	"[--expires DUR]` (printed once; the state keeps a SHA-256 hash), listed by `token list` and\n" +
	"refused (401) from the next request on after `token revoke ID`. Scopes: `agents` (the\n" +
	"default: create, drive and delete the tenant's agents, and read them), `read` (GET routes\n" +
	"only), `metrics` (monitoring: `/v1/health`, no agent route), `admin`. An agent belongs to the tenant that created it (its `tenant`\n" +
	"field): another tenant gets 404 for it on every route, the same answer as for an id that does\n" +
	"not exist, and never sees it in a list. A checkpoint belongs to its agent's tenant the same way.\n" +
	"\n" +
	"## Durable state, resumable streams, idempotent retries\n" +
	"\n" +
	"The server keeps its agents, turns and events in its state (`--state`: a SQLite file by\n" +
	"default, Postgres for several replicas). After a restart, even a SIGKILL, the agents are\n" +
	"there: a turn that was running recorded as `interrupted` with the events stored so far (before\n" +
	"the server listens), their sandboxes adopted, and the next turn continuing the CLI's session.\n" +
	"The adoptions run once the server listens: meanwhile the reads (`GET` of an agent, its turns,\n" +
	"its events) answer from the state, and a call that needs the sandbox (a turn, exec, files,\n" +
	"sessions, DELETE) adopts it first or waits for the adoption under way. An agent whose sandbox\n" +
	"is gone has status `lost` and a `reason`; the routes that need its sandbox answer 410. With\n" +
	"several replicas, a turn whose replica died is recorded as `interrupted` once its lease\n" +
	"expired, by the first replica that reads the agent or follows that turn.\n" +
	"\n" +
	"Every stored message of a stream has an SSE `id` (an agent's messages are numbered from 1\n" +
	"without gaps). A client that lost a stream sends the last id it got as `Last-Event-ID`:\n" +
	"`GET .../events` replays what came after it, then goes live; for a turn, `GET\n" +
	"/v1/agents/{id}/turns/{n}` with `Accept: text/event-stream` does the same and ends with the\n" +
	"`result`. Events beyond a turn's stored budget (5,000 events, about 4 MiB) are streamed live\n" +
	"without an id and are not replayed.\n" +
	"\n" +
	"`Idempotency-Key: KEY` on `POST /v1/agents` and `POST .../turns` makes a retry safe: the same\n" +
	"key (per tenant) answers what the first request made — the agent (200,\n" +
	"`Idempotent-Replayed: true`), or the turn, running or not (its JSON once it ends, or its\n" +
	"stream after `Last-Event-ID`) — and never starts a second sandbox or turn. A key still held by\n" +
	"a request in progress answers 409 `conflict`; a key used on another route 422 `conflict`; a\n" +
	"request that failed frees its key.\n" +
	"\n" +
	"## Errors\n" +
	"\n" +
	"Every error is a JSON [Error](#error) `{\"error\": \"message\", \"kind\": \"KIND\"}`, its kind with its status:\n" +
	"\n" +
	"| Status | kind | when |\n" +
	"|---|---|---|\n" +
	"| 400 | `invalid_argument` | bad JSON, unknown field, bad value |\n" +
	"| 401 | `unauthorized` | missing, wrong, expired or revoked token |\n" +
	"| 403 | `forbidden` | the token's scopes do not allow the route |\n" +
	"| 404 | `not_found` | unknown agent or checkpoint (or another tenant's), turn, session, image or path |\n" +
	"| 409 | `busy` | a turn is running on this agent, here or through another replica (a session call waits 2 s for it first) |\n" +
	"| 409 | `conflict` | the Idempotency-Key's first request is still in progress (`Retry-After`); `DELETE /v1/checkpoints/{id}` while an agent runs on it; `POST .../fork` of an agent started with env by another server process (a restart, another replica); `GET .../changes` of an agent without a repository (or not attached here any more), or whose branch exists and would not fast-forward |\n" +
	"| 410 | `lost` | the agent's sandbox is gone; only reading it and DELETE are left |\n" +
	"| 413 | `too_large` | the body is over the limit (`serve_max_body_bytes`) |\n" +
	"| 415 | `invalid_argument` | `PUT .../files` with a Content-Type other than `application/x-tar` or `application/octet-stream` |\n" +
	"| 422 | `driver_error` | the agent CLI reported a failure; `driver`, `exit_code` and `status` are set; git is missing in the sandbox's image (a create with `repo`, `GET .../changes`) |\n" +
	"| 422 | `unsafe_archive` | `GET .../files`: nothing safe to copy (a symlink, a device); a create's `repo.bundle`, or an agent's repository changes (`GET .../changes`), refused by git's or the server's checks |\n" +
	"| 422 | `too_large` | `GET .../files`: over `max_download_bytes`, `_entries` or `_depth`; a repository bundle or the agent's repository changes over a cap (bytes, objects, one file's size) |\n" +
	"| 422 | `conflict` | the Idempotency-Key was used for another request |\n" +
	"| 422 | `checkpoint_too_large` | a checkpoint of a sandbox over `checkpoint_max_bytes` (none was made) |\n" +
	"| 429 | `limit` | `serve_max_agents`, `serve_max_concurrent_turns`, `serve_tenant_max_agents`, `serve_tenant_max_turns` or `serve_tenant_checkpoint_bytes` reached (`Retry-After`: 60 for the checkpoint bytes) |\n" +
	"| 500 | `internal` | unexpected server error (a corrupt stored checkpoint among them) |\n" +
	"| 501 | `unsupported` | the driver does not support this; `DELETE /v1/checkpoints/{id}` of an image the server's engine cannot remove |\n" +
	"| 503 | `engine_unavailable` | the container engine cannot be reached |\n" +
	"| 503 | `interrupted` | the client went away, the agent was deleted or the server is shutting down |\n" +
	"| 504 | `timeout` | the operation took longer than its timeout |\n" +
	"\n" +
	"A failed turn answers its error status with the turn so far in `turn`:\n" +
	"`{\"error\": \"...\", \"kind\": \"timeout\", \"turn\": {TurnResult}}`.\n" +
	"\n" +
	"## Server-sent events\n" +
	"\n" +
	"`POST /v1/agents/{id}/turns` with `Accept: text/event-stream` answers 200 and streams one SSE\n" +
	"message per [Event](#event), then the [TurnResult](#turnresult) (with `error` and `kind` set\n" +
	"when the turn failed), each with its id:\n" +
	"\n" +
	"```\n" +
	"id: 2\n" +
	"event: event\n" +
	"data: {\"kind\":\"text\",\"payload\":{\"text\":\"hi\"},\"session_id\":\"…\",\"time\":\"…\",\"line\":3,\"turn\":1}\n" +
	"\n" +
	"id: 5\n" +
	"event: result\n" +
	"data: {\"turn\":1,\"prompt\":\"say hi\",\"reply\":\"hi\",\"session_id\":\"…\",\"exit_code\":0,…}\n" +
	"```\n" +
	"\n" +
	"`GET /v1/agents/{id}/events` watches every turn of an agent: `event: turn_start` (data\n" +
	"[TurnStart](#turnstart)), `event: event` (data [Event](#event)) and `event: turn_end` (data a\n" +
	"[TurnResult](#turnresult) without events), each with its id, with a comment line `: ping` every\n" +
	"15 s. A client that\n" +
	"disconnects from a turn's stream aborts the turn; the session is kept.\n" +
	"\n" +
	"## Example\n" +
	"\n" +
	"```sh\n" +
	"TOKEN=$(cat ~/.config/sandbox-agent/serve-token)\n" +
	"API=http://127.0.0.1:7860\n" +
	"# an agent with a scripted fake model (no key needed)\n" +
	"ID=$(curl -s -H \"Authorization: Bearer $TOKEN\" $API/v1/agents \\\n" +
	"  -d '{\"driver\":\"claude\",\"fake_model_script\":{\"responses\":[{\"tool\":\"shell\",\"command\":\"echo hi\"},{\"text\":\"DONE\"}]}}' | jq -r .id)\n" +
	"curl -s -H \"Authorization: Bearer $TOKEN\" $API/v1/agents/$ID/turns -d '{\"prompt\":\"run echo hi\"}' | jq .reply\n" +
	"curl -N -H \"Authorization: Bearer $TOKEN\" -H 'Accept: text/event-stream' $API/v1/agents/$ID/turns -d '{\"prompt\":\"again\"}'\n" +
	"curl -s -H \"Authorization: Bearer $TOKEN\" -X DELETE $API/v1/agents/$ID\n" +
	"```\n" +
	"\n" +
	"Time values in bodies are seconds as JSON numbers (`timeout`, `keepalive`); durations in\n" +
	"results are milliseconds (`duration_ms`).\n"

// renderAPIDoc renders the reference of docs/api-http.md from the
// document: the preamble, a route index, one section per operation (in
// document order) and one per schema.
func renderAPIDoc(doc *omap) string {
	var b strings.Builder
	b.WriteString(apiDocPreamble)
	ops := operations(doc)

	b.WriteString("\n## Routes\n\n| Method | Path | Summary |\n|---|---|---|\n")
	for _, o := range ops {
		fmt.Fprintf(&b, "| %s | [`%s`](#%s) | %s |\n", o.method, o.path,
			anchor(o.method+" "+o.path), cell(o.op.str("summary")))
	}

	for _, o := range ops {
		fmt.Fprintf(&b, "\n### `%s %s`\n\n", o.method, o.path)
		meta := fmt.Sprintf("**%s** · operationId `%s`", o.op.str("summary"), o.op.str("operationId"))
		for _, tag := range o.op.arr("tags") {
			meta += fmt.Sprintf(" · tag `%s`", tag)
		}
		if sec, ok := o.op.get("security").([]any); ok && len(sec) == 0 {
			meta += " · no authentication"
		}
		b.WriteString(meta + "\n")
		if d := o.op.str("description"); d != "" {
			b.WriteString("\n" + d + "\n")
		}
		if params := o.parameters(doc); len(params) > 0 {
			b.WriteString("\n| Parameter | In | Type | Required | Description |\n|---|---|---|---|---|\n")
			for _, p := range params {
				fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", p.str("name"), p.str("in"),
					typeOf(doc, p.obj("schema")), yesNo(p.get("required") == true), cell(p.str("description")))
			}
		}
		if body := deref(doc, o.op.obj("requestBody")); body != nil {
			req := "optional"
			if body.get("required") == true {
				req = "required"
			}
			fmt.Fprintf(&b, "\nRequest body (%s): %s", req, contentOf(doc, body.obj("content")))
			if d := body.str("description"); d != "" {
				b.WriteString(" — " + d)
			}
			b.WriteString("\n")
		}
		b.WriteString("\n| Status | Content | Description |\n|---|---|---|\n")
		resps := o.op.obj("responses")
		for _, code := range resps.ks() {
			r := deref(doc, resps.obj(code))
			content := contentOf(doc, r.obj("content"))
			if content == "" {
				content = "—"
			}
			desc := r.str("description")
			headers := r.obj("headers")
			for _, h := range headers.ks() {
				hd := deref(doc, headers.obj(h))
				desc += fmt.Sprintf(" Header `%s` (%s): %s", h, typeOf(doc, hd.obj("schema")), hd.str("description"))
			}
			fmt.Fprintf(&b, "| %s | %s | %s |\n", code, cell(content), cell(desc))
		}
	}

	b.WriteString("\n## Schemas\n")
	schemas := doc.obj("components").obj("schemas")
	for _, name := range schemas.ks() {
		s := schemas.obj(name)
		fmt.Fprintf(&b, "\n### %s\n\n%s\n", name, s.str("description"))
		props := s.obj("properties")
		if props == nil || len(props.ks()) == 0 {
			fmt.Fprintf(&b, "\nType: %s\n", typeOf(doc, s))
			continue
		}
		required := map[string]bool{}
		for _, r := range s.arr("required") {
			required[r.(string)] = true
		}
		b.WriteString("\n| Field | Type | Required | Description |\n|---|---|---|---|\n")
		for _, k := range props.ks() {
			p := props.obj(k)
			desc := p.str("description")
			if desc == "" && p.str("$ref") != "" {
				desc = deref(doc, p).str("description")
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", k, cell(typeOf(doc, p)), yesNo(required[k]), cell(desc))
		}
		if s.get("additionalProperties") == false {
			b.WriteString("\nUnknown fields are rejected.\n")
		}
	}
	return b.String()
}

// contentOf lists a content map: "`media/type` schema, ...".
func contentOf(doc, content *omap) string {
	var parts []string
	for _, mt := range content.ks() {
		part := "`" + mt + "`"
		if s := content.obj(mt).obj("schema"); s != nil {
			part += " " + typeOf(doc, s)
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, ", ")
}

// typeOf describes a schema in a few words, linking named schemas.
func typeOf(doc, s *omap) string {
	if s == nil {
		return "any"
	}
	if ref := s.str("$ref"); ref != "" {
		name := ref[strings.LastIndex(ref, "/")+1:]
		return fmt.Sprintf("[%s](#%s)", name, anchor(name))
	}
	var t string
	switch v := s.get("type").(type) {
	case string:
		t = v
	case []any:
		var ts []string
		for _, x := range v {
			ts = append(ts, fmt.Sprint(x))
		}
		t = strings.Join(ts, " or ")
	default:
		t = "any"
	}
	switch t {
	case "array":
		return "array of " + typeOf(doc, s.obj("items"))
	case "object":
		if ap := s.obj("additionalProperties"); ap != nil {
			return "map of string to " + typeOf(doc, ap)
		}
	}
	if s.str("contentMediaType") != "" {
		return "binary"
	}
	var notes []string
	for _, k := range []string{"format", "contentEncoding"} {
		if v := s.str(k); v != "" {
			notes = append(notes, v)
		}
	}
	if m, ok := s.get("minimum").(json.Number); ok {
		notes = append(notes, "≥ "+m.String())
	}
	if m, ok := s.get("maximum").(json.Number); ok {
		notes = append(notes, "≤ "+m.String())
	}
	if len(notes) > 0 {
		t += " (" + strings.Join(notes, ", ") + ")"
	}
	if enum := s.arr("enum"); len(enum) > 0 {
		var vs []string
		for _, e := range enum {
			vs = append(vs, fmt.Sprintf("`%v`", e))
		}
		t += ": " + strings.Join(vs, ", ")
	}
	return t
}

// anchor is GitHub's heading anchor of text.
func anchor(text string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// cell makes text fit in a table cell.
func cell(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	return strings.ReplaceAll(s, "|", `\|`)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
