//go:build integration

package sandboxagent_test

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"testing"
	"time"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
	"github.com/sandbox-agent/sandbox-agent/driver/pi"
	"github.com/sandbox-agent/sandbox-agent/fakemodel"
	"github.com/sandbox-agent/sandbox-agent/internal/testenv"
)

// modelPathClient streams completions from inside the sandbox with node's
// fetch, alternating straight to the fake model ($1, key $2) and through
// the relay and the model proxy (the base URL pi was configured with, the
// token $3), $4 times each; it prints the first- and last-byte times in
// milliseconds as JSON.
const modelPathClient = `
const [direct, key, token, n] = process.argv.slice(1);
const m = JSON.parse(require('fs').readFileSync(process.env.HOME + '/.pi/agent/models.json'));
const proxied = Object.values(m.providers)[0].baseUrl;
const body = JSON.stringify({model: 'fake-model', stream: true, messages: [{role: 'user', content: 'hi'}]});
async function once(base, k) {
  const t0 = performance.now();
  const r = await fetch(base + '/chat/completions', {method: 'POST', body,
    headers: {'content-type': 'application/json', authorization: 'Bearer ' + k}});
  if (r.status !== 200) throw new Error(base + ': ' + r.status);
  const rd = r.body.getReader();
  let first = 0;
  for (;;) { const {done} = await rd.read(); if (!first) first = performance.now() - t0; if (done) break; }
  return [first, performance.now() - t0];
}
(async () => {
  const out = {direct: {first: [], last: []}, proxy: {first: [], last: []}};
  for (let i = 0; i < 5; i++) { await once(direct, key); await once(proxied, token); } // warm-up
  for (let i = 0; i < +n; i++) {
    for (const [name, base, k] of [['direct', direct, key], ['proxy', proxied, token]]) {
      const [f, l] = await once(base, k); out[name].first.push(f); out[name].last.push(l);
    }
  }
  console.log(JSON.stringify(out));
})().catch(e => { console.error(String(e)); process.exit(1); });
`

// BenchmarkModelPath: a streamed completion as a CLI in the sandbox sees
// it, side by side in one run — straight to the fake model (the sandbox
// on host networking, so it can) and through the relay and the model
// proxy (every agent's path). It reports the p50 of first and last byte
// of each and what the boundary adds. One round of max(b.N, 200)
// completions per path, whatever b.N:
//
//	go test -tags integration -run '^$' -bench '^BenchmarkModelPath$' -benchtime 1x .
func BenchmarkModelPath(b *testing.B) {
	rt := testenv.Runtime(b)
	key := "sk-path-" + randHex(12)
	srv, err := fakemodel.New(fakemodel.Script{ExpectKey: key}, fakemodel.Options{})
	if err != nil {
		b.Fatal(err)
	}
	if err := srv.Start("127.0.0.1:0"); err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	a, err := sandboxagent.Start(ctx, rt, pi.New(pi.Options{BaseURL: srv.URL() + "/v1", APIKey: key}),
		sandboxagent.WithConfig(testenv.Config()), sandboxagent.WithAudit(false), sandboxagent.WithNetwork("host"))
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	n := max(b.N, 200)
	b.ResetTimer()
	res, err := a.Container().Run(ctx, sandboxagent.ExecRequest{Timeout: 5 * time.Minute,
		Cmd: []string{"node", "-e", modelPathClient, srv.URL() + "/v1", key, a.Driver().Secrets()[0], strconv.Itoa(n)}})
	b.StopTimer()
	if err != nil || res.ExitCode != 0 {
		b.Fatalf("client: exit %d %v: %s", res.ExitCode, err, res.Stderr)
	}
	var out map[string]map[string][]float64
	if err := json.Unmarshal(res.Stdout, &out); err != nil {
		b.Fatalf("%v: %s", err, res.Stdout)
	}
	p50 := func(v []float64) float64 {
		v = slices.Clone(v)
		slices.Sort(v)
		return v[len(v)/2] * 1000 // µs
	}
	for _, edge := range []string{"first", "last"} {
		d, p := p50(out["direct"][edge]), p50(out["proxy"][edge])
		b.ReportMetric(d, "direct-"+edge+"-p50-µs")
		b.ReportMetric(p, "proxied-"+edge+"-p50-µs")
		b.ReportMetric(p-d, "added-"+edge+"-p50-µs")
	}
}
