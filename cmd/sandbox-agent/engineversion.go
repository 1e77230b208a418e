package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/moby/moby/client"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
)

// pingVersion names a Docker or Podman engine from two pings, where
// Runtime.Info also asks /version and /info (8 and 9 ms each on Docker
// 20.10, most of `sandbox-agent version`'s time): the client's ping
// negotiates the API version, a second one on a connection of our own
// reads the Server header the client does not expose. An error means
// "ask Info" (an engine that answers otherwise, a TLS endpoint), never
// a different answer.
func pingVersion(ctx context.Context, cli *client.Client) (sandboxagent.EngineInfo, error) {
	if _, err := cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		return sandboxagent.EngineInfo{}, err
	}
	conn, err := cli.Dialer()(ctx)
	if err != nil {
		return sandboxagent.EngineInfo{}, err
	}
	defer conn.Close()
	deadline := time.Now().Add(5 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = conn.SetDeadline(deadline)
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, "http://engine/_ping", nil)
	if err != nil {
		return sandboxagent.EngineInfo{}, err
	}
	req.Close = true
	if err := req.Write(conn); err != nil {
		return sandboxagent.EngineInfo{}, err
	}
	// The engine is the other side of a socket: bounded like any input.
	resp, err := http.ReadResponse(bufio.NewReader(io.LimitReader(conn, 64<<10)), req)
	if err != nil {
		return sandboxagent.EngineInfo{}, err
	}
	resp.Body.Close()
	return engineFromPing(resp.StatusCode, resp.Header, cli.ClientVersion())
}

// errPingUnknown: a ping that does not name the engine.
var errPingUnknown = errors.New("the engine's ping names no engine")

// engineFromPing reads the engine from a ping's headers as Info would
// name it: Podman by its libpod API version (the header Info reads too),
// Docker by the version in "Server: Docker/VERSION (OS)", which is
// /version's Version.
func engineFromPing(status int, h http.Header, apiVersion string) (sandboxagent.EngineInfo, error) {
	if status != http.StatusOK {
		return sandboxagent.EngineInfo{}, fmt.Errorf("%w: status %d", errPingUnknown, status)
	}
	if v := h.Get("Libpod-Api-Version"); v != "" {
		return sandboxagent.EngineInfo{Name: "podman", Version: v, APIVersion: apiVersion}, nil
	}
	name, rest, ok := strings.Cut(h.Get("Server"), "/")
	v, _, _ := strings.Cut(rest, " ")
	if !ok || name != "Docker" || v == "" {
		return sandboxagent.EngineInfo{}, fmt.Errorf("%w: Server %.100q", errPingUnknown, h.Get("Server"))
	}
	return sandboxagent.EngineInfo{Name: "docker", Version: v, APIVersion: apiVersion}, nil
}
