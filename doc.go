// Package sandboxagent runs LLM coding-agent CLIs inside disposable, hardened
// containers and brings their output back to the host safely.
//
// The root package is the domain and the engine: the Agent and its turns
// (checked against the model proxy's record), the Sandbox (one container),
// events, the Config value, the Driver and Runtime interfaces and
// the errors callers branch on. The rest are subpackages:
// engines (runtime/docker, runtime/podman, runtime/kubernetes,
// runtime/startlimit, runtime/execlimit; runtime/runtimetest is their
// contract suite), agent
// CLIs (driver/claude, codex, dsh, opencode, pi; driver/drivertest), the
// boundary (modelproxy, egressproxy, trajectory), what comes out (audit,
// safetar, seccomp), images and images/catalog, config (loading a
// Config), pool (agents started ahead of need), gc (leftover sandboxes),
// metering (usage, prices, budgets), fakemodel (a scripted LLM
// server), server (HTTP) and cmd/sandbox-agent.
package sandboxagent
