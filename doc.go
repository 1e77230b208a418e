// Package sandboxagent runs LLM coding-agent CLIs inside disposable, hardened
// containers and brings their output back to the host safely.
//
// The root package holds the domain: the Sandbox (one container), the
// Runtime port a container engine implements, configuration, and the error
// types callers branch on. Implementations live in subpackages:
// runtime/docker (Docker Engine API), safetar (hostile-archive extraction),
// images (building the pinned agent images), images/catalog (the image
// pins, Dockerfiles and released digests, compiled in), fakemodel (a
// scripted LLM server for tests and zero-key runs).
package sandboxagent
