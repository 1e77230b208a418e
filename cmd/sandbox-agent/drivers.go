package main

import (
	"fmt"
	"sort"
	"strings"

	sandboxagent "github.com/sandbox-agent/sandbox-agent"
)

// endpoint is where a driver's CLI finds its model.
type endpoint struct {
	BaseURL  string // "" = the provider's own endpoint
	APIKey   string
	Provider string // opencode only
}

// driverFactories builds each driver from an endpoint. The cmd package is
// the only place that knows every driver.
var driverFactories = map[string]func(endpoint) sandboxagent.Driver{}

func driverNames() []string {
	names := make([]string, 0, len(driverFactories))
	for n := range driverFactories {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func newDriver(name string, ep endpoint) (sandboxagent.Driver, error) {
	f, ok := driverFactories[name]
	if !ok {
		return nil, fmt.Errorf("unknown driver %q (have: %s)", name, strings.Join(driverNames(), ", "))
	}
	return f(ep), nil
}
